#include "gui/compare_chart.hpp"

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QGridLayout>
#include <QHorizontalBarSeries>
#include <QHorizontalStackedBarSeries>
#include <QLegendMarker>
#include <QLineSeries>
#include <QPen>
#include <QRegularExpression>
#include <QStringList>
#include <QValueAxis>
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
  // Small: at the default size the eight names do not fit three quarters of the page's width.
  QFont small = chart->legend()->font();
  small.setPointSize(7);
  chart->legend()->setFont(small);
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
      {"CPU memory", [](const Plan& p) { return double(p.device(Device::Cpu).peak); }},
      {"NVMe", [](const Plan& p) { return double(p.device(Device::Nvme).peak); }}};
  return grouped_chart("Host memory and NVMe per node (peak)", variants, current, sets,
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

// The layouts top to bottom, as the variants: the job's own marked, those that do not fit said.
QBarCategoryAxis* layout_axis(const std::vector<LayoutPlan>& layouts) {
  auto* axis = new QBarCategoryAxis;
  for (auto l = layouts.rbegin(); l != layouts.rend(); ++l) {
    QString label = short_layout_label(*l) + (l->result.fits ? "" : " (does not fit)");
    if (l->current) label = "\u25b6 " + label;
    axis->append(label);
  }
  QFont font = axis->labelsFont();
  font.setPointSize(7);
  axis->setLabelsFont(font);
  return axis;
}

QChart* layout_bars(const QString& title, const std::vector<LayoutPlan>& layouts,
                    const QString& set_name, const QString& unit_title, double top,
                    const std::function<double(const SweepResult&)>& value) {
  auto* set = new QBarSet(set_name);
  for (auto l = layouts.rbegin(); l != layouts.rend(); ++l) set->append(value(l->result));
  auto* series = new QHorizontalBarSeries;
  series->append(set);
  auto* chart = make_chart(title);
  auto* categories = layout_axis(layouts);
  auto* values = make_value_axis(unit_title, 0, top);
  values->setTickCount(3);  // a quarter of the page holds three numbers, not six
  values->setLabelFormat("%.3g");
  chart->addAxis(categories, Qt::AlignLeft);
  chart->addAxis(values, Qt::AlignBottom);
  attach(chart, series, categories, values);
  return chart;
}

QChart* layout_memory_chart(const LayoutComparison& comparison, const Plan& current) {
  const auto gpu = std::size_t(Device::Gpu);
  double top = double(current.device(Device::Gpu).capacity);
  for (const auto& l : comparison.layouts) top = std::max(top, double(l.result.peak[gpu]));
  const ByteUnit unit = byte_unit_for(top);
  auto* chart = layout_bars("3D layouts: GPU peak", comparison.layouts,
                            "GPU peak per rank", unit.name, top * 1.05 / unit.bytes,
                            [&](const SweepResult& r) { return double(r.peak[gpu]) / unit.bytes; });
  auto* capacity = new QLineSeries;
  const double cap = double(current.device(Device::Gpu).capacity) / unit.bytes;
  capacity->setName(QString("GPU capacity %1 %2").arg(cap, 0, 'f', 2).arg(unit.name));
  capacity->append(cap, -0.5);
  capacity->append(cap, double(comparison.layouts.size()) - 0.5);
  capacity->setPen(QPen(QColor(0xd62728), 2, Qt::DashLine));
  attach(chart, capacity, chart->axes(Qt::Vertical).front(), chart->axes(Qt::Horizontal).front());
  // The title names the bars; the legend keeps the capacity only (a third of the width).
  for (QLegendMarker* marker : chart->legend()->markers())
    marker->setVisible(marker->series() == capacity);
  return chart;
}

// Seconds, or milliseconds for steps under a second; a layout that does not fit is not simulated.
QChart* layout_time_chart(const LayoutComparison& comparison, std::int64_t global_batch) {
  double top = 0;
  for (const auto& l : comparison.layouts) top = std::max(top, l.result.step_time);
  const bool seconds = top >= 1;
  const double scale = seconds ? 1 : 1e3;
  QChart* chart =
      layout_bars("3D layouts: step time", comparison.layouts, "step time",
                  QString("%1 (batch %2)").arg(seconds ? "s" : "ms").arg(global_batch),
                  std::max(top * scale, 1e-3) * 1.08,
                  [&](const SweepResult& r) { return r.step_time * scale; });
  chart->legend()->setVisible(false);  // the title names the bars
  return chart;
}

// One line per reason: the variants or layouts it leaves out, then the reason.
QString left_out_text(const VariantComparison& variants, const LayoutComparison& layouts) {
  std::vector<std::pair<std::string, QStringList>> by_reason;
  const auto add = [&](const std::string& name, const std::string& reason) {
    auto found = std::find_if(by_reason.begin(), by_reason.end(),
                              [&](const auto& entry) { return entry.first == reason; });
    if (found == by_reason.end()) found = by_reason.insert(by_reason.end(), {reason, {}});
    found->second << QString::fromStdString(name);
  };
  for (const auto& [variant, reason] : variants.left_out) add(variant.label, reason);
  for (const auto& [layout, reason] : layouts.left_out) add(layout.label(), reason);
  QStringList lines;
  for (const auto& [reason, names] : by_reason)
    lines << QString("Left out: %1: %2").arg(names.join(", "), QString::fromStdString(reason));
  return lines.join('\n');
}

}  // namespace

QString short_variant_label(const std::string& label) {
  QString text = QString::fromStdString(label);
  text.replace("ZeRO-", "Z").replace(" + opt:", " o:").replace(" + param:", " p:");
  return text.replace(" + CPUOffload", " + cpu");
}

QString short_layout_label(const LayoutPlan& layout) {
  QString text = QString::fromStdString(layout.label());
  text.replace(" x ", " ").replace("(ZeRO-1)", "(Z1)");
  for (const char* size : {"tp ", "pp ", "dp ", "ep ", "v "})
    text.replace(QRegularExpression(QString("\\b%1(\\d)").arg(size)),
                 QString(size).trimmed() + "\\1");
  return text;
}

bool is_current_variant(const Variant& variant, const Plan& plan) {
  const ScheduleContext& c = plan.schedule.context;
  return variant.stage == c.stage && variant.offload_optimizer == c.optimizer_device &&
         variant.offload_param == c.param_device;
}

ComparePage::ComparePage(Session& session, QWidget* parent) : QWidget(parent), session_(session) {
  status_ = new QLabel(this);
  status_->setWordWrap(true);
  memory_ = make_chart_view(make_chart(""), this);
  host_ = make_chart_view(make_chart(""), this);
  traffic_ = make_chart_view(make_chart(""), this);
  layout_memory_ = make_chart_view(make_chart(""), this);
  layout_time_ = make_chart_view(make_chart(""), this);
  left_out_ = new QLabel(this);
  left_out_->setWordWrap(true);
  QFont small = left_out_->font();
  small.setPointSize(8);
  left_out_->setFont(small);
  auto* grid = new QGridLayout;
  grid->addWidget(memory_, 0, 0, 1, 2);
  grid->addWidget(host_, 1, 0);
  grid->addWidget(traffic_, 1, 1);
  grid->addWidget(layout_memory_, 0, 2);
  grid->addWidget(layout_time_, 1, 2);
  // The variants' labels are the longest ("ZeRO-3 + opt:nvme + param:nvme (does not fit)").
  grid->setColumnStretch(0, 3);
  grid->setColumnStretch(1, 3);
  grid->setColumnStretch(2, 2);
  // Even rows: the lower charts' ten variants need about 20 pixels each for Qt Charts to draw
  // their labels.
  grid->setRowStretch(0, 1);
  grid->setRowStretch(1, 1);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(status_);
  layout->addLayout(grid, 1);
  layout->addWidget(left_out_);
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
    layouts_ = compare_layouts(planned->plan.request, {});
  } catch (const std::exception& error) {
    variants_ = {};
    layouts_ = {};
    status_->setText(QString("The variants cannot be planned: %1").arg(error.what()));
    left_out_->clear();
    return;
  }
  status_->setText(
      QString("%1 on %2 x %3: every variant with the current batch, precision and checkpointing; "
              "right: the GPUs split as TP x PP x DP (ZeRO-1 where a pipeline refuses the stage)")
          .arg(QString::fromStdString(planned->plan.request.model.name))
          .arg(session_.job_gpus())
          .arg(QString::fromStdString(planned->plan.request.cluster.gpu.name)));
  left_out_->setText(left_out_text(variants_, layouts_));
  left_out_->setVisible(!left_out_->text().isEmpty());
  rebuild_charts();
}

void ComparePage::rebuild_charts() {
  const Plan& current = session_.planned()->plan;
  replace_chart(*memory_, memory_chart(variants_.plans, current));
  replace_chart(*host_, host_chart(variants_.plans, current));
  replace_chart(*traffic_, traffic_chart(variants_.plans, current));
  replace_chart(*layout_memory_, layout_memory_chart(layouts_, current));
  replace_chart(*layout_time_, layout_time_chart(layouts_, sweep_train_batch(current.request)));
}

}  // namespace zerolens::gui
