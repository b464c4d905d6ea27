#include "gui/image_export.hpp"

#include <QBuffer>
#include <QByteArray>
#include <QFileInfo>
#include <QPainter>
#include <QPixmap>
#include <QSvgGenerator>

#include <string_view>

#include "sim/core/error.hpp"
#include "sim/core/file_io.hpp"

namespace zerolens::gui {
namespace {

// Images are drawn into memory, then written through the shared writer (whole or not at all).
QByteArray svg_bytes(QWidget& widget, const QString& path) {
  QByteArray bytes;
  QBuffer buffer(&bytes);
  buffer.open(QIODevice::WriteOnly);
  QSvgGenerator generator;
  generator.setOutputDevice(&buffer);
  generator.setSize(widget.size());
  generator.setViewBox(QRect(QPoint(0, 0), widget.size()));
  generator.setTitle("zerolens");
  QPainter painter;
  if (!painter.begin(&generator)) throw InputError(path.toStdString(), "cannot draw the SVG");
  widget.render(&painter);
  painter.end();
  return bytes;
}

QByteArray raster_bytes(QWidget& widget, const QString& path, const char* format) {
  QByteArray bytes;
  QBuffer buffer(&bytes);
  buffer.open(QIODevice::WriteOnly);
  if (!widget.grab().save(&buffer, format))
    throw InputError(path.toStdString(), "cannot encode the image");
  return bytes;
}

}  // namespace

void export_widget(QWidget& widget, const QString& path) {
  const QString suffix = QFileInfo(path).suffix().toLower();
  QByteArray bytes;
  if (suffix == "svg") {
    bytes = svg_bytes(widget, path);
  } else if (suffix == "png") {
    bytes = raster_bytes(widget, path, "PNG");
  } else if (suffix == "jpg" || suffix == "jpeg") {
    bytes = raster_bytes(widget, path, "JPG");
  } else {
    throw InputError(path.toStdString(),
                     "unknown image type '" + suffix.toStdString() + "' (use .png or .svg)");
  }
  file_io::write_file_atomically(path.toStdString(),
                                 std::string_view(bytes.constData(), std::size_t(bytes.size())));
}

}  // namespace zerolens::gui
