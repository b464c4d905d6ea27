#include "gui/compare_chart.hpp"

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QGridLayout>
#include <QHorizontalBarSeries>
#include <QHorizontalStackedBarSeries>
#include <QLineSeries>
#include <QPen>
#include <QVBoxLayout>
#include <algorithm>
#include <functional>

#include "gui/chart_util.hpp"
#include "gui/palette.hpp"
#include "gui/traffic_chart.hpp"

namespace zerolens::gui {
namespace {

// Variants top to bottom (horizontal bars draw the first category at the bottom, so they go in
// reversed), in a small font: Qt Charts elides a category's label to "..." when it is taller than
// its row (every one of them, "DP" included, at 17 pixels a row); the half-width charts get short
// labels too.
QBarCategoryAxis* variant_axis(const std::vector<VariantPlan>& variants, const Plan& current,
                               bool short_labels = false) {
  auto* axis = new QBarCategoryAxis;
  for (auto v = variants.rbegin(); v != variants.rend(); ++v) {
    QString label = short_labels ? short_variant_label(v->variant.label)
                                 : QString::fromStdString(v->variant.label) +
                                       (v->plan.fits() ? "" : " (does not fit)");
    if (is_current_variant(v->variant, current)) label = "\u25b6 " + label;
    axis->append(label);
  }
  QFont font = axis->labelsFont();
  font.setPointSize(7);
  axis->setLabelsFont(font);
  return axis;
}

template <typename Value>
void append_reversed(QBarSet* set, const std::vector<VariantPlan>& variants, Value value) {
  for (auto v = variants.rbegin(); v != variants.rend(); ++v) set->append(value(v->plan));
}

void attach(QChart* chart, QAbstractSeries* series, QAbstractAxis* x, QAbstractAxis* y) {
  chart->addSeries(series);
  series->attachAxis(x);
  series->attachAxis(y);
}

QChart* memory_chart(const std::vector<VariantPlan>& variants, const Plan& current) {
  double top = double(current.device(Device::Gpu).capacity);
  for (const auto& v : variants) top = std::max(top, double(v.plan.device(Device::Gpu).peak));
  const ByteUnit unit = byte_unit_for(top);
  auto* stacked = new QHorizontalStackedBarSeries;
  for (int c = 0; c < kCategoryCount; ++c) {
    auto* set = new QBarSet(category_label(Category(c)));
    set->setColor(category_colour(Category(c)));
    append_reversed(set, variants, [&](const Plan& p) {
      return double(p.device(Device::Gpu).categories[std::size_t(c)]) / unit.bytes;
    });
    stacked->append(set);
  }
  auto* capacity = new QLineSeries;
  const double cap = double(current.device(Device::Gpu).capacity) / unit.bytes;
  capacity->setName(QString("GPU capacity %1 %2").arg(cap, 0, 'f', 2).arg(unit.name));
  capacity->append(cap, -0.5);
  capacity->append(cap, double(variants.size()) - 0.5);
  capacity->setPen(QPen(QColor(0xd62728), 2, Qt::DashLine));
  auto* chart =
      make_chart("GPU memory per rank at the peak, by category (\u25b6 the current config)");
  auto* categories = variant_axis(variants, current);
  auto* values = make_value_axis(unit.name, 0, top * 1.05 / unit.bytes);
  chart->addAxis(categories, Qt::AlignLeft);
  chart->addAxis(values, Qt::AlignBottom);
  attach(chart, stacked, categories, values);
  attach(chart, capacity, categories, values);
  return chart;
}

// Grouped bars, one set per (name, value-of-plan) pair.
template <typename Value>
QChart* grouped_chart(const QString& title, const std::vector<VariantPlan>& variants,
                      const Plan& current, const std::vector<std::pair<QString, Value>>& sets,
                      const QString& per) {
  double top = 0;
  for (const auto& v : variants) {
    for (const auto& set : sets) top = std::max(top, set.second(v.plan));
  }
  const ByteUnit unit = byte_unit_for(top);
  auto* series = new QHorizontalBarSeries;
  for (const auto& [name, value] : sets) {
    auto* set = new QBarSet(name);
    append_reversed(set, variants, [&](const Plan& p) { return value(p) / unit.bytes; });
    series->append(set);
  }
  auto* chart = make_chart(title);
  auto* categories = variant_axis(variants, current, true);
  auto* values =
      make_value_axis(QString(unit.name) + per, 0, std::max(top, 1.0) * 1.08 / unit.bytes);
  chart->addAxis(categories, Qt::AlignLeft);
  chart->addAxis(values, Qt::AlignBottom);
  attach(chart, series, categories, values);
  return chart;
}

using PlanValue = std::function<double(const Plan&)>;

QChart* host_chart(const std::vector<VariantPlan>& variants, const Plan& current) {
  const std::vector<std::pair<QString, PlanValue>> sets = {
      {"CPU memory per node", [](const Plan& p) { return double(p.device(Device::Cpu).peak); }},
      {"NVMe per node", [](const Plan& p) { return double(p.device(Device::Nvme).peak); }}};
  return grouped_chart("Host memory and NVMe per node at the peak", variants, current, sets,
                       " per node");
}

QChart* traffic_chart(const std::vector<VariantPlan>& variants, const Plan& current) {
  const std::vector<std::pair<QString, PlanValue>> sets = {
      {"network",
       [](const Plan& p) { return double(p.comm.links.intra_node + p.comm.links.inter_node); }},
      {"PCIe", [](const Plan& p) { return double(p.comm.links.pcie_h2d + p.comm.links.pcie_d2h); }},
      {"NVMe I/O",
       [](const Plan& p) { return double(p.comm.links.nvme_read + p.comm.links.nvme_write); }}};
  return grouped_chart("Traffic per rank per step", variants, current, sets, " per rank");
}

}  // namespace

QString short_variant_label(const std::string& label) {
  QString text = QString::fromStdString(label);
  text.replace("ZeRO-", "Z").replace(" + opt:", " o:").replace(" + param:", " p:");
  return text.replace(" + CPUOffload", " + cpu");
}

bool is_current_variant(const Variant& variant, const Plan& plan) {
  const ScheduleContext& c = plan.schedule.context;
  return variant.stage == c.stage && variant.offload_optimizer == c.optimizer_device &&
         variant.offload_param == c.param_device;
}

ComparePage::ComparePage(Session& session, QWidget* parent) : QWidget(parent), session_(session) {
  status_ = new QLabel(this);
  memory_ = make_chart_view(make_chart(""), this);
  host_ = make_chart_view(make_chart(""), this);
  traffic_ = make_chart_view(make_chart(""), this);
  auto* grid = new QGridLayout;
  grid->addWidget(memory_, 0, 0, 1, 2);
  grid->addWidget(host_, 1, 0);
  grid->addWidget(traffic_, 1, 1);
  // Even rows: the lower charts' ten variants need about 20 pixels each for Qt Charts to draw
  // their labels.
  grid->setRowStretch(0, 1);
  grid->setRowStretch(1, 1);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(status_);
  layout->addLayout(grid, 1);
  connect(&session_, &Session::planChanged, this, [this] {
    stale_ = true;
    if (isVisible()) ensure_computed();
  });
}

void ComparePage::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  ensure_computed();
}

void ComparePage::ensure_computed() {
  const Planned* planned = session_.planned();
  if (!stale_ || !planned) return;
  stale_ = false;
  try {
    variants_ = compare_variants(planned->plan.request);
  } catch (const std::exception& error) {
    variants_.clear();
    status_->setText(QString("The variants cannot be planned: %1").arg(error.what()));
    return;
  }
  status_->setText(
      QString("%1 on %2 x %3: every variant with the current batch, precision and checkpointing")
          .arg(QString::fromStdString(planned->plan.request.model.name))
          .arg(session_.job_gpus())
          .arg(QString::fromStdString(planned->plan.request.cluster.gpu.name)));
  rebuild_charts();
}

void ComparePage::rebuild_charts() {
  const Plan& current = session_.planned()->plan;
  replace_chart(*memory_, memory_chart(variants_, current));
  replace_chart(*host_, host_chart(variants_, current));
  replace_chart(*traffic_, traffic_chart(variants_, current));
}

}  // namespace zerolens::gui
