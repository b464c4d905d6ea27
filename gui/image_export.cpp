#include "gui/image_export.hpp"

#include <QFileInfo>
#include <QPainter>
#include <QPixmap>
#include <QSvgGenerator>

#include "sim/core/error.hpp"

namespace zerolens::gui {
namespace {

void export_svg(QWidget& widget, const QString& path) {
  QSvgGenerator generator;
  generator.setFileName(path);
  generator.setSize(widget.size());
  generator.setViewBox(QRect(QPoint(0, 0), widget.size()));
  generator.setTitle("zerolens");
  QPainter painter;
  if (!painter.begin(&generator)) throw InputError(path.toStdString(), "cannot be written");
  widget.render(&painter);
  painter.end();
}

}  // namespace

void export_widget(QWidget& widget, const QString& path) {
  const QString suffix = QFileInfo(path).suffix().toLower();
  if (suffix == "svg") {
    export_svg(widget, path);
  } else if (suffix == "png" || suffix == "jpg" || suffix == "jpeg") {
    if (!widget.grab().save(path)) throw InputError(path.toStdString(), "cannot be written");
  } else {
    throw InputError(path.toStdString(),
                     "unknown image type '" + suffix.toStdString() + "' (use .png or .svg)");
  }
  if (!QFileInfo::exists(path)) throw InputError(path.toStdString(), "cannot be written");
}

}  // namespace zerolens::gui
