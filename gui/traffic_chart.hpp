#pragma once
// Traffic of one step per rank: per collective (calls, summed message sizes, bytes sent) and per
// link (NVLink/NVSwitch, the inter-node network, PCIe each way, NVMe each way), from the plan's
// communication report.
#include <QChartView>
#include <QWidget>

#include "gui/session.hpp"

namespace zerolens::gui {

class TrafficPage : public QWidget {
  Q_OBJECT

 public:
  explicit TrafficPage(Session& session, QWidget* parent = nullptr);
  QChartView& collectives() { return *collectives_; }
  QChartView& links() { return *links_; }

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  void rebuild();
  bool dirty_ = true;
  Session& session_;
  QChartView* collectives_;
  QChartView* links_;
};

// Replaces the view's chart and deletes the old one (QChartView::setChart does not).
void replace_chart(QChartView& view, QChart* chart);

}  // namespace zerolens::gui
