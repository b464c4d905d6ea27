#include "gui/chart_util.hpp"

#include <QLegend>

namespace zerolens::gui {

ByteUnit byte_unit_for(double max_bytes) {
  if (max_bytes >= 1e9) return {1e9, "GB"};
  if (max_bytes >= 1e6) return {1e6, "MB"};
  return {1e3, "kB"};
}

QChartView* make_chart_view(QChart* chart, QWidget* parent) {
  auto* view = new QChartView(chart, parent);
  view->setRenderHint(QPainter::Antialiasing);
  view->setMinimumHeight(180);
  return view;
}

QChart* make_chart(const QString& title) {
  auto* chart = new QChart;
  chart->setTitle(title);
  QFont font = chart->titleFont();
  font.setBold(true);
  chart->setTitleFont(font);
  chart->legend()->setAlignment(Qt::AlignBottom);
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->setMargins(QMargins(4, 4, 4, 4));
  return chart;
}

QValueAxis* make_value_axis(const QString& title, double min, double max) {
  auto* axis = new QValueAxis;
  axis->setTitleText(title);
  axis->setRange(min, max > min ? max : min + 1);
  axis->applyNiceNumbers();
  return axis;
}

}  // namespace zerolens::gui
