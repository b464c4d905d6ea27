#pragma once
// Any view as an image: PNG (raster, as on screen) or SVG (vector) by the file's extension.
#include <QString>
#include <QWidget>

namespace zerolens::gui {

// Throws InputError naming the file when the extension is unknown or the file cannot be written.
void export_widget(QWidget& widget, const QString& path);

}  // namespace zerolens::gui
