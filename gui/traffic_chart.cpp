#include "gui/traffic_chart.hpp"

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QHBoxLayout>
#include <QHorizontalBarSeries>
#include <algorithm>
#include <utility>
#include <vector>

#include "gui/chart_util.hpp"

namespace zerolens::gui {
namespace {

struct Bar {
  QString label;
  std::vector<double> values;  // bytes, one per set
};

QChart* bar_chart(const QString& title, const QString& axis, const QStringList& set_names,
                  const std::vector<Bar>& bars) {
  double top = 0;
  for (const auto& bar : bars)
    top = std::max(top, *std::max_element(bar.values.begin(), bar.values.end()));
  const ByteUnit unit = byte_unit_for(top);
  auto* series = new QHorizontalBarSeries;
  for (qsizetype s = 0; s < set_names.size(); ++s) {
    auto* set = new QBarSet(set_names[s]);
    for (const auto& bar : bars) set->append(bar.values[std::size_t(s)] / unit.bytes);
    series->append(set);
  }
  series->setLabelsVisible(true);
  series->setLabelsFormat("@value");
  series->setLabelsPrecision(3);
  series->setLabelsPosition(QAbstractBarSeries::LabelsOutsideEnd);
  auto* chart = make_chart(title);
  chart->addSeries(series);
  auto* categories = new QBarCategoryAxis;
  for (const auto& bar : bars) categories->append(bar.label);
  auto* values = make_value_axis(QString(unit.name) + axis, 0, top * 1.15 / unit.bytes);
  chart->addAxis(categories, Qt::AlignLeft);
  chart->addAxis(values, Qt::AlignBottom);
  series->attachAxis(categories);
  series->attachAxis(values);
  return chart;
}

QString collective_label(OpKind kind, std::int64_t calls) {
  return QString("%1 (%2 call%3)").arg(to_string(kind)).arg(calls).arg(calls == 1 ? "" : "s");
}

QChart* collectives_chart(const Plan& plan) {
  std::vector<Bar> bars;
  // With tensor parallelism each row names its group (dp, tp), as `zerolens plan` does.
  const ScheduleContext& c = plan.schedule.context;
  const bool groups =
      c.tensor_parallel > 1 || c.hpz_group > 0 || c.quantized_gradients || c.expert_parallel > 1;
  const auto add = [&](const auto& collectives, const char* group) {
    for (int k = 0; k < kOpKindCount; ++k) {
      const CollectiveTotals& totals = collectives[std::size_t(k)];
      if (totals.calls == 0) continue;
      // With the group named, "(130 calls)" would not fit the axis: "tp reduce_scatter x130".
      const QString label =
          groups ? QString("%1%2 \u00d7%3").arg(group).arg(to_string(OpKind(k))).arg(totals.calls)
                 : collective_label(OpKind(k), totals.calls);
      bars.push_back({label, {double(totals.bytes), double(totals.traffic_bytes)}});
    }
  };
  add(plan.comm.collectives, groups ? "dp " : "");
  if (groups) add(plan.comm.tensor_parallel, "tp ");
  if (groups) add(plan.comm.secondary, "hpz ");
  if (groups) add(plan.comm.node_local, "node ");
  if (groups) add(plan.comm.cross_node, "cross-node ");
  if (groups) add(plan.comm.expert_parallel, "ep ");
  if (groups) add(plan.comm.expert_data, "expert-dp ");
  if (bars.empty()) bars.push_back({"no collectives (1 rank)", {0, 0}});
  std::reverse(bars.begin(), bars.end());
  const QString title =
      c.tensor_parallel > 1
          ? QString("Traffic per collective in one step (dp: %1 ranks, tp: %2 ranks)")
                .arg(c.dp_size)
                .arg(c.tensor_parallel)
      : groups ? QString("Traffic per collective in one step (dp: %1 ranks)").arg(c.dp_size)
               : QString("Traffic per collective in one step");
  return bar_chart(title, " per step",
                   {"message sizes, summed (as nccl-tests counts them)", "bytes each rank sends"},
                   bars);
}

QChart* links_chart(const Plan& plan) {
  const Cluster& cluster = plan.request.cluster;
  const LinkTotals& l = plan.comm.links;
  std::vector<Bar> bars = {
      {QString::fromStdString(cluster.node.intra_node.name), {double(l.intra_node)}},
      {QString::fromStdString(cluster.inter_node.name), {double(l.inter_node)}},
      {"PCIe host\u2192device", {double(l.pcie_h2d)}},
      {"PCIe device\u2192host", {double(l.pcie_d2h)}},
      {"NVMe read", {double(l.nvme_read)}},
      {"NVMe write", {double(l.nvme_write)}}};
  std::reverse(bars.begin(), bars.end());
  return bar_chart("Traffic per link in one step", " per rank per step", {"bytes each rank sends"},
                   bars);
}

}  // namespace

void replace_chart(QChartView& view, QChart* chart) {
  QChart* old = view.chart();
  view.setChart(chart);
  delete old;
}

TrafficPage::TrafficPage(Session& session, QWidget* parent) : QWidget(parent), session_(session) {
  collectives_ = make_chart_view(make_chart(""), this);
  links_ = make_chart_view(make_chart(""), this);
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(collectives_, 1);
  layout->addWidget(links_, 1);
  connect(&session_, &Session::planChanged, this, [this] {
    if (isVisible()) {
      rebuild();
    } else {
      dirty_ = true;
    }
  });
}

void TrafficPage::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (dirty_) rebuild();
}

void TrafficPage::rebuild() {
  dirty_ = false;
  const Planned* planned = session_.planned();
  if (!planned) return;
  replace_chart(*collectives_, collectives_chart(planned->plan));
  replace_chart(*links_, links_chart(planned->plan));
}

}  // namespace zerolens::gui
