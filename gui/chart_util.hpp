#pragma once
// Small helpers shared by the Qt Charts pages: units sized to the data and chart views set up
// alike.
#include <QChart>
#include <QChartView>
#include <QString>
#include <QValueAxis>

namespace zerolens::gui {

struct ByteUnit {
  double bytes;
  const char* name;
};
// GB, MB or kB (decimal, as everywhere in zerolens) so the largest value reads between 1 and 1000.
ByteUnit byte_unit_for(double max_bytes);

QChartView* make_chart_view(QChart* chart, QWidget* parent);
QChart* make_chart(const QString& title);
QValueAxis* make_value_axis(const QString& title, double min, double max);

}  // namespace zerolens::gui
