#include "gui/memory_chart.hpp"

#include "gui/op_words.hpp"

#include <QAreaSeries>
#include <QEvent>
#include <QGraphicsSceneMouseEvent>
#include <QHBoxLayout>
#include <QLabel>
#include <QLegend>
#include <QLegendMarker>
#include <QMouseEvent>
#include <QPen>
#include <QSignalBlocker>
#include <algorithm>

#include "gui/chart_util.hpp"
#include "gui/palette.hpp"
#include "gui/timeline_scene.hpp"
#include "gui/trace_checks.hpp"
#include "gui/traffic_chart.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens::gui {
namespace {

const char* const kDeviceNames[] = {"GPU", "CPU", "NVMe"};

double max_y(const std::vector<QPointF>& points) {
  double top = 0;
  for (const auto& p : points) top = std::max(top, p.y());
  return top;
}

QLineSeries* line_series(const QString& name, const std::vector<QPointF>& points, double x_scale,
                         double y_scale, QPen pen) {
  auto* series = new QLineSeries;
  series->setName(name);
  QList<QPointF> scaled;
  scaled.reserve(qsizetype(points.size()));
  for (const auto& p : points) scaled.append(QPointF(p.x() * x_scale, p.y() / y_scale));
  series->replace(scaled);
  series->setPen(pen);
  return series;
}

Bytes capacity_per_rank(const Plan& plan, Device device) {
  const DeviceReport& report = plan.device(device);
  return report.capacity / std::max(1, report.ranks_sharing);
}

bool device_used(const Planned& planned, Device device) {
  if (device == Device::Gpu) return true;
  return std::any_of(planned.states.begin(), planned.states.end(),
                     [&](const DeviceComponentBytes& state) {
                       const auto& c = state[std::size_t(device)];
                       return std::any_of(c.begin(), c.end(), [](Bytes b) { return b > 0; });
                     });
}

// A rank's memory on a device by category over the step, stacked: per category, the (seconds,
// bytes) steps of the categories up to it, from the replay's states (before the step, then after
// each op at its end time, in time order). The allocator's reserve beyond the allocated bytes is
// not in it (it belongs to the peak: the reserved and device-used levels show it).
}  // namespace

std::vector<std::pair<Category, std::vector<QPointF>>> category_stack(const Planned& planned,
                                                                      Device device,
                                                                      ShowMemory show) {
  const auto sums = [&](const DeviceComponentBytes& state) {
    CategoryBytes bytes{};
    for (int c = 0; c < kComponentCount; ++c)
      if (shows(show, Component(c)))
        bytes[std::size_t(category_of(Component(c)))] += state[std::size_t(device)][std::size_t(c)];
    return bytes;
  };
  // The timeline's memory clock (memory_times): program order, each state once it holds.
  const std::vector<double> times = memory_times(planned.timeline.ops);
  std::vector<std::pair<double, CategoryBytes>> samples{{0.0, sums(planned.states.front())}};
  for (std::size_t i = 0; i < times.size(); ++i)
    samples.emplace_back(times[i], sums(planned.states[i + 1]));
  std::vector<std::pair<Category, std::vector<QPointF>>> stack;
  std::vector<double> below(samples.size(), 0.0);
  for (int c = 0; c < kCategoryCount; ++c) {
    bool any = false;
    std::vector<QPointF> top;
    for (std::size_t k = 0; k < samples.size(); ++k) {
      const double bytes = double(samples[k].second[std::size_t(c)]);
      any |= bytes > 0;
      below[k] += bytes;
      if (k > 0) top.emplace_back(samples[k].first, top.back().y());  // a step, not a ramp
      top.emplace_back(samples[k].first, below[k]);
    }
    if (any) stack.emplace_back(Category(c), std::move(top));
  }
  return stack;
}

std::vector<std::pair<Component, Bytes>> top_allocations(const Plan& plan, Device device,
                                                         std::size_t count) {
  std::vector<std::pair<Component, Bytes>> held;
  const ComponentBytes& components = plan.device(device).components;
  for (int c = 0; c < kComponentCount; ++c)
    if (components[std::size_t(c)] > 0) held.emplace_back(Component(c), components[std::size_t(c)]);
  std::stable_sort(held.begin(), held.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (held.size() > count) held.resize(count);
  return held;
}

std::int64_t op_at_time(const Timeline& timeline, double seconds) {
  std::int64_t found = -1;
  double found_end = -1;
  for (std::size_t i = 0; i < timeline.ops.size(); ++i) {
    const double end = timeline.ops[i].end();
    if (end <= seconds && end > found_end) found = std::int64_t(i), found_end = end;
  }
  return found;
}

namespace {

// The stack as filled areas, each between the category below it and its own top (an area series
// owns the line series it is given, so each gets its own).
std::vector<QAreaSeries*> stacked_areas(
    const std::vector<std::pair<Category, std::vector<QPointF>>>& stack, double x_scale,
    double y_scale) {
  std::vector<QAreaSeries*> areas;
  const std::vector<QPointF>* below = nullptr;
  for (const auto& [category, top] : stack) {
    auto* upper = line_series("", top, x_scale, y_scale, QPen(Qt::NoPen));
    auto* lower = below ? line_series("", *below, x_scale, y_scale, QPen(Qt::NoPen)) : nullptr;
    auto* area = new QAreaSeries(upper, lower);
    QColor colour = category_colour(category);
    colour.setAlpha(150);
    area->setBrush(colour);
    area->setPen(QPen(Qt::NoPen));
    area->setName(category_label(category));
    areas.push_back(area);
    below = &top;
  }
  return areas;
}

// The simulated timeline's memory samples (one per op end, in time order) drawn as steps.
std::vector<QPointF> predicted_steps(const Timeline& timeline, Device device) {
  std::vector<QPointF> points;
  for (const auto& sample : timeline.memory) {
    const double value = double(sample.bytes[std::size_t(device)]);
    if (!points.empty()) points.emplace_back(sample.time, points.back().y());
    points.emplace_back(sample.time, value);
  }
  return points;
}

// The predicted memory after each op laid on a loaded trace's clock, when the trace has the plan's
// ops (a measured CPU run takes milliseconds where the plan predicts microseconds on a GPU: on one
// time axis the prediction would be a sliver at zero). Empty when the ops do not line up.
std::optional<Trace> predicted_on_loaded_clock(const Trace& predicted, const Trace& loaded) {
  const int rank = loaded.ranks.front();
  const auto predicted_ops = ops_of_rank(predicted, predicted.ranks.front());
  const auto loaded_ops = ops_of_rank(loaded, rank);
  if (predicted_ops.size() != loaded_ops.size()) return std::nullopt;
  Trace moved;
  moved.ranks = {rank};
  for (std::size_t i = 0; i < loaded_ops.size(); ++i) {
    if (predicted_ops[i]->kind != loaded_ops[i]->kind) return std::nullopt;
    TraceOp op = *loaded_ops[i];
    op.memory_after = predicted_ops[i]->memory_after;
    moved.ops.push_back(op);
  }
  return moved;
}

}  // namespace

std::vector<QPointF> memory_steps(const Trace& trace, int rank, Device device,
                                  std::optional<Bytes> before) {
  // Program order, each state once it holds (sim's memory_times: the running maximum of the ends).
  std::vector<const TraceOp*> ops = ops_of_rank(trace, rank);
  std::stable_sort(ops.begin(), ops.end(),
                   [](const TraceOp* a, const TraceOp* b) { return a->index < b->index; });
  std::vector<OpTiming> timings;
  for (const TraceOp* op : ops) timings.push_back({op->start, op->duration});
  const std::vector<double> times = memory_times(timings);
  std::vector<QPointF> points;
  double last = before ? double(*before) : -1;
  if (before) points.emplace_back(0, last);
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const double t = times[k], value = double(ops[k]->memory_after[std::size_t(device)]);
    if (last >= 0) points.emplace_back(t, last);
    points.emplace_back(t, value);
    last = value;
  }
  return points;
}

MemoryPage::MemoryPage(Session& session, QWidget* parent) : QWidget(parent), session_(session) {
  scale_ = new QComboBox(this);
  scale_->addItems({"to the device's capacity", "to the step's peak"});
  show_ = new QComboBox(this);
  show_->addItems({"all memory", "model states and their transient copies", "model states only"});
  show_->setToolTip(
      "What the stack holds (as the Ranks tab's Show); the predicted line and the peak "
      "levels are all memory's");
  auto* controls = new QHBoxLayout;
  auto* about = new QLabel(
      "Memory of one rank over the step (CPU, NVMe: the rank's share of its node). Show:", this);
  about->setWordWrap(true);
  controls->addWidget(about, 1);
  controls->addWidget(show_);
  controls->addWidget(new QLabel("Y axis:", this));
  controls->addWidget(scale_);
  controls->addStretch();
  peak_ = new QLabel(this);
  peak_->setWordWrap(true);
  peak_->setTextFormat(Qt::RichText);
  peak_->setToolTip(
      "The largest allocations when the GPU reaches its peak (Jump to -> GPU peak puts the cursor "
      "there)");
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addLayout(controls);
  layout->addWidget(peak_);
  for (std::size_t d = 0; d < views_.size(); ++d) {
    views_[d] = make_chart_view(make_chart(""), this);
    views_[d]->setHidden(d > 0);  // shown once a plan uses the device
    layout->addWidget(views_[d], 1);
  }
  for (auto* view : views_) view->viewport()->installEventFilter(this);
  connect(scale_, &QComboBox::currentIndexChanged, this, &MemoryPage::request_rebuild);
  connect(show_, &QComboBox::currentIndexChanged, this, &MemoryPage::request_rebuild);
  connect(&session_, &Session::planChanged, this, &MemoryPage::request_rebuild);
  connect(&session_, &Session::traceChanged, this, &MemoryPage::request_rebuild);
  connect(&session_, &Session::stepChanged, this, &MemoryPage::move_cursor);
}

// A click on a chart moves the step cursor to the op that ends last before the clicked time.
bool MemoryPage::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() != QEvent::MouseButtonPress || !session_.planned())
    return QWidget::eventFilter(watched, event);
  for (auto* view : views_) {
    if (view->viewport() != watched || !view->chart()) continue;
    const QPointF at = static_cast<QMouseEvent*>(event)->position();
    const QPointF value =
        view->chart()->mapToValue(view->chart()->mapFromScene(view->mapToScene(at.toPoint())));
    const double scale = view->chart()->property("time_scale").toDouble();
    if (scale > 0) session_.set_step(op_at_time(session_.planned()->timeline, value.x() / scale));
    return true;
  }
  return QWidget::eventFilter(watched, event);
}

std::vector<QChartView*> MemoryPage::charts() {
  if (dirty_) rebuild();
  std::vector<QChartView*> shown;
  for (auto* view : views_) {
    if (!view->isHidden()) shown.push_back(view);
  }
  return shown;
}

void MemoryPage::request_rebuild() {
  if (isVisible()) {
    rebuild();
  } else {
    dirty_ = true;
  }
}

void MemoryPage::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (dirty_) rebuild();
}

void MemoryPage::set_scale(ScaleMode scale) {
  const QSignalBlocker block(scale_);
  scale_->setCurrentIndex(int(scale));
  request_rebuild();
}

// The combo box lists ShowMemory's values in order.
void MemoryPage::set_show(ShowMemory show) {
  const QSignalBlocker block(show_);
  show_->setCurrentIndex(int(show));
  request_rebuild();
}

ShowMemory MemoryPage::show() const {
  return ShowMemory(show_->currentIndex());
}

void MemoryPage::rebuild() {
  dirty_ = false;
  cursors_.clear();
  const Planned* planned = session_.planned();
  if (!planned) return;
  show_peak_allocations(*planned);
  for (int d = 0; d < kDeviceCount; ++d) {
    const bool used = device_used(*planned, Device(d));
    views_[std::size_t(d)]->setHidden(!used);
    replace_chart(*views_[std::size_t(d)], used ? device_chart(Device(d)) : make_chart(""));
  }
  move_cursor();
}

void MemoryPage::show_peak_allocations(const Planned& planned) {
  const Plan& plan = planned.plan;
  const DeviceReport& gpu = plan.device(Device::Gpu);
  QString text = "<b>At the GPU's peak</b>";
  if (gpu.peak_op >= 0)
    text += QString(" (op %1: %2)")
                .arg(gpu.peak_op + 1)
                .arg(QString::fromStdString(
                         plan.schedule.describe(std::size_t(gpu.peak_op), plan.rank_model))
                         .toHtmlEscaped());
  text += ", the largest allocations:";
  for (const auto& [component, bytes] : top_allocations(plan, Device::Gpu, 6))
    text += QString(" %1 %2 (%3 %),")
                .arg(to_string(component))
                .arg(QString::fromStdString(human_bytes(bytes)))
                .arg(100.0 * double(bytes) / double(std::max<Bytes>(1, gpu.peak)), 0, 'f', 1);
  text.chop(1);
  peak_->setText(text + ".");
}

QChart* MemoryPage::device_chart(Device device) {
  const Planned& planned = *session_.planned();
  const Trace& predicted = planned.predicted;
  auto points = predicted_steps(planned.timeline, device);
  QString predicted_name = "predicted";
  std::vector<QPointF> measured;
  const LoadedTrace* loaded = session_.loaded();
  if (loaded && !loaded->trace.ranks.empty()) {
    measured = memory_steps(loaded->trace, loaded->trace.ranks.front(), device, {});
    if (const auto moved = predicted_on_loaded_clock(predicted, loaded->trace)) {
      points = memory_steps(*moved, moved->ranks.front(), device, {});
      predicted_name = "predicted (at the trace's op times)";
    }
  }
  // Only the model states (and copies): the stack alone, the whole-memory lines left out.
  const bool all = show() == ShowMemory::All;
  const auto stack = category_stack(planned, device, show());
  const Bytes capacity = capacity_per_rank(planned.plan, device);
  double top = all ? std::max({max_y(points), max_y(measured),
                               double(planned.plan.device(device).peak_per_rank)})
                   : std::max(1.0, stack.empty() ? 0.0 : max_y(stack.back().second));
  if (scale_->currentIndex() == int(ScaleMode::Capacity)) top = std::max(top, double(capacity));
  const double end =
      std::max({trace_end_time(predicted), loaded ? trace_end_time(loaded->trace) : 0.0, 1e-9});
  const TimeUnit time = time_unit_for(end);
  const ByteUnit unit = byte_unit_for(top);
  auto* chart = make_chart(QString("%1 memory of rank %2%3")
                               .arg(kDeviceNames[int(device)])
                               .arg(predicted.ranks.front())
                               .arg(all ? "" : QString(": %1").arg(show_->currentText())));
  // A dozen entries (categories, lines, levels): one a row on the right, where they are not elided
  // ("param...", "gradie..." at the bottom).
  chart->legend()->setAlignment(Qt::AlignRight);
  std::vector<QLineSeries*> series;
  if (all)
    series.push_back(line_series(predicted_name, points, time.per_second, unit.bytes,
                                 QPen(QColor(0x1f77b4), 2)));
  if (all && !measured.empty()) {
    const QString name =
        loaded->trace.source == "exec" ? "measured (loaded trace)" : "loaded trace";
    series.push_back(line_series(name, measured, time.per_second, unit.bytes,
                                 QPen(QColor(0xff7f0e), 2, Qt::DashLine)));
  }
  series.push_back(
      line_series(QString("capacity %1").arg(QString::fromStdString(human_bytes(capacity))),
                  {QPointF(0, double(capacity)), QPointF(end, double(capacity))}, time.per_second,
                  unit.bytes, QPen(QColor(0xd62728), 1.5, Qt::DashLine)));
  const Bytes peak = planned.plan.device(device).peak_per_rank;
  auto level = [&](const QString& label, Bytes bytes, const QColor& colour) {
    series.push_back(line_series(
        QString("%1 %2 %3").arg(label).arg(double(bytes) / unit.bytes, 0, 'f', 2).arg(unit.name),
        {QPointF(0, double(bytes)), QPointF(end, double(bytes))}, time.per_second, unit.bytes,
        QPen(colour, 1.5, Qt::DotLine)));
  };
  if (!all) {
    // The levels are all memory's.
  } else if (device == Device::Gpu && !planned.plan.request.options.model_states_only) {
    // The three figures a user reads: PyTorch's allocated and reserved, nvidia-smi's device used.
    level("peak allocated", planned.plan.gpu.allocated, QColor(0x9467bd));
    level("peak reserved (allocator)", planned.plan.gpu.reserved, QColor(0x8c564b));
    level("device used (nvidia-smi)", peak, QColor(0x2ca02c));
  } else {
    level("plan's peak (highest inside an op)", peak, QColor(0x2ca02c));
  }
  series.push_back(line_series("step cursor", {}, 1, 1, QPen(QColor(0x555555), 1)));
  cursors_.push_back(series.back());
  auto* x = make_value_axis(QString("time (%1)").arg(time.name), 0, end * time.per_second);
  auto* y = make_value_axis(unit.name, 0, top * 1.05 / unit.bytes);
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  for (auto* area : stacked_areas(stack, time.per_second, unit.bytes)) {
    chart->addSeries(area);
    area->attachAxis(x);
    area->attachAxis(y);
  }
  for (auto* s : series) {
    chart->addSeries(s);
    s->attachAxis(x);
    s->attachAxis(y);
  }
  for (QLegendMarker* marker : chart->legend()->markers(cursors_.back())) marker->setVisible(false);
  cursors_.back()->setProperty("y_max", y->max());
  chart->setProperty("time_scale", time.per_second);
  cursors_.back()->setProperty("time_scale", time.per_second);
  return chart;
}

void MemoryPage::move_cursor() {
  const Planned* planned = session_.planned();
  if (!planned) return;
  const std::int64_t step = session_.step();
  const double t = step < 0 ? 0 : planned->timeline.ops.at(std::size_t(step)).end();
  for (auto* cursor : cursors_) {
    const double x = t * cursor->property("time_scale").toDouble();
    cursor->replace(
        QList<QPointF>{QPointF(x, 0), QPointF(x, cursor->property("y_max").toDouble())});
  }
}

}  // namespace zerolens::gui
