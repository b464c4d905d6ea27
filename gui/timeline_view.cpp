#include "gui/timeline_view.hpp"

#include <QGraphicsRectItem>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QPushButton>
#include <QScrollBar>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QVBoxLayout>
#include <QWheelEvent>
#include <algorithm>
#include <cstdlib>

namespace zerolens::gui {
namespace {

constexpr double kMaxSceneWidth = 5e7;  // pixels; beyond this zooming in stops

}  // namespace

TimelineView::TimelineView(Session& session, QWidget* parent)
    : QGraphicsView(parent), session_(session) {
  scene_.setItemIndexMethod(QGraphicsScene::NoIndex);  // rebuilt often, hit-tested rarely
  setScene(&scene_);
  setDragMode(QGraphicsView::ScrollHandDrag);
  setAlignment(Qt::AlignLeft | Qt::AlignTop);
  setBackgroundBrush(Qt::white);
  connect(&session_, &Session::stepChanged, this, &TimelineView::show_step);
  connect(horizontalScrollBar(), &QScrollBar::valueChanged, this, &TimelineView::pin_labels);
  connect(&session_, &Session::rankChanged, this, [this] {
    const Planned* planned = session_.planned();
    if (planned && planned->plan.schedule.context.tensor_parallel > 1) request_rebuild();
  });
}

void TimelineView::pin_labels() {
  const QRectF visible = mapToScene(viewport()->rect()).boundingRect();
  pin_row_labels(items_, visible.left());
  draw_time_axis(scene_, items_, visible.left(), visible.right());
}

void TimelineView::request_rebuild() {
  if (isVisible()) {
    rebuild();
  } else {
    dirty_ = true;
  }
}

void TimelineView::showEvent(QShowEvent* event) {
  QGraphicsView::showEvent(event);
  if (dirty_) rebuild();
}

const Trace* TimelineView::shown_trace() const {
  if (use_loaded_ && session_.loaded()) return &session_.loaded()->trace;
  return session_.planned() ? &session_.planned()->predicted : nullptr;
}

void TimelineView::set_use_loaded(bool use_loaded) {
  use_loaded_ = use_loaded;
  request_rebuild();
}

void TimelineView::rebuild() {
  dirty_ = false;
  highlighted_.clear();
  items_ = {};  // the scene is cleared next: no stale item is moved while the scroll range changes
  const Trace* trace = shown_trace();
  if (!trace) {
    scene_.clear();
    return;
  }
  const double end = std::max(trace_end_time(*trace), 1e-9);
  TimelineGeometry geometry;
  geometry.max_ranks = max_ranks_;
  if (const Planned* planned = session_.planned();
      planned && planned->plan.schedule.context.tensor_parallel > 1) {
    // The selected rank's data-parallel group, as the rank view draws it; longer row names.
    geometry.tp_size = planned->plan.schedule.context.tensor_parallel;
    geometry.tp_index = session_.selected_rank() % geometry.tp_size;
    geometry.label_width = 215;
  }
  built_width_ = viewport()->width();
  // At zoom 1 the scene (the label column, the step and 40 pixels after it) fits the view.
  const double width = std::max(200.0, double(built_width_) - geometry.label_width - 42);
  geometry.pixels_per_second = std::min(width * zoom_, kMaxSceneWidth) / end;
  items_ = build_timeline_scene(scene_, *trace, geometry);
  apply_filter();
  show_step();
  pin_labels();
}

void TimelineView::set_filter(const QString& text) {
  filter_ = text.trimmed();
  apply_filter();
}

void TimelineView::apply_filter() {
  matches_.clear();
  const Trace* trace = shown_trace();
  if (!trace) return;
  std::unordered_map<std::int64_t, bool> matches;  // by schedule index
  for (const auto& op : trace->ops) {
    const bool match = filter_.isEmpty() ||
                       QString::fromStdString(op.kind).contains(filter_, Qt::CaseInsensitive) ||
                       QString::fromStdString(op.layer_name).contains(filter_, Qt::CaseInsensitive);
    matches[op.index] = matches[op.index] || match;
  }
  if (!filter_.isEmpty()) {
    for (const auto& [index, match] : matches)
      if (match) matches_.push_back(index);
    std::sort(matches_.begin(), matches_.end());
  }
  emit matchesChanged();
  for (const auto& [index, drawn] : items_.by_index)
    for (auto* item : drawn) item->setOpacity(matches[index] ? 1.0 : 0.15);
  // A merged item stays bright when any of its ops matches.
  for (const auto& [index, drawn] : items_.by_index)
    for (auto* item : drawn)
      if (matches[index]) item->setOpacity(1.0);
}

std::int64_t TimelineView::next_match(std::int64_t after) const {
  if (matches_.empty()) return -1;
  const auto next = std::upper_bound(matches_.begin(), matches_.end(), after);
  return next == matches_.end() ? matches_.front() : *next;
}

void TimelineView::keyPressEvent(QKeyEvent* event) {
  const int step = std::max(40, viewport()->width() / 5);
  switch (event->key()) {
    case Qt::Key_W:
      zoom(1.5);
      return;
    case Qt::Key_S:
      zoom(1 / 1.5);
      return;
    case Qt::Key_A:
      horizontalScrollBar()->setValue(horizontalScrollBar()->value() - step);
      return;
    case Qt::Key_D:
      horizontalScrollBar()->setValue(horizontalScrollBar()->value() + step);
      return;
    default:
      QGraphicsView::keyPressEvent(event);
  }
}

void TimelineView::show_step() {
  if (dirty_) return;  // drawn with the next rebuild
  for (auto* item : highlighted_) {
    item->setPen(op_pen(item->rect()));
    item->setZValue(0);
  }
  highlighted_.clear();
  const auto found = items_.by_index.find(session_.step());
  if (found == items_.by_index.end() || !items_.cursor) return;
  for (auto* item : found->second) {
    item->setPen(QPen(QColor(0xd62728), 2.5));
    item->setZValue(2);
    highlighted_.push_back(item);
  }
  const QRectF first = found->second.front()->rect();
  QLineF line = items_.cursor->line();
  line.setP1({first.left(), line.y1()});
  line.setP2({first.left(), line.y2()});
  items_.cursor->setLine(line);
  // Scroll sideways only: the rows and the time axis stay where the user put them; the op clear
  // of the row labels' column.
  const QRectF visible = mapToScene(viewport()->rect()).boundingRect();
  ensureVisible(QRectF(first.left(), visible.top() + 1, first.width(), 1),
                int(items_.label_width) + 40, 0);
}

void TimelineView::set_max_ranks(int ranks) {
  max_ranks_ = ranks;
  request_rebuild();
}

void TimelineView::zoom(double factor) {
  const double centre_fraction = (horizontalScrollBar()->value() + viewport()->width() / 2.0) /
                                 std::max(1.0, scene_.sceneRect().width());
  zoom_ = std::clamp(zoom_ * factor, 1.0, 1e7);
  rebuild();
  horizontalScrollBar()->setValue(
      int(centre_fraction * scene_.sceneRect().width() - viewport()->width() / 2.0));
}

void TimelineView::fit() {
  zoom_ = 1;
  rebuild();
}

void TimelineView::mousePressEvent(QMouseEvent* event) {
  for (QGraphicsItem* item : items(event->position().toPoint())) {
    // The row labels' column hides the ops under it.
    if (item == items_.row_labels || item->parentItem() == items_.row_labels) break;
    QGraphicsItem* op =
        item->data(item_key::Role).toInt() == int(ItemRole::Op) ? item : item->parentItem();
    if (op && op->data(item_key::Role).toInt() == int(ItemRole::Op)) {
      session_.set_step(op->data(item_key::Op).toLongLong());
      break;
    }
  }
  QGraphicsView::mousePressEvent(event);  // and start a drag to pan
}

void TimelineView::wheelEvent(QWheelEvent* event) {
  if (!(event->modifiers() & Qt::ControlModifier)) {
    QGraphicsView::wheelEvent(event);
    return;
  }
  zoom(event->angleDelta().y() > 0 ? 1.25 : 0.8);
  event->accept();
}

void TimelineView::resizeEvent(QResizeEvent* event) {
  QGraphicsView::resizeEvent(event);
  // A scroll bar coming or going changes the width a little: not worth redrawing every op.
  if (std::abs(viewport()->width() - built_width_) > 40) request_rebuild();
}

TimelinePage::TimelinePage(Session& session, QWidget* parent) : QWidget(parent), session_(session) {
  view_ = new TimelineView(session, this);
  source_ = new QComboBox(this);
  source_->addItems({"predicted (simulated)", "loaded trace"});
  source_->setToolTip("Which trace the chart shows");
  summary_ = new QLabel(this);
  summary_->setWordWrap(true);
  summary_->setToolTip(
      "Ctrl+wheel or W/S zoom, drag or A/D pan, click an op to move the step cursor there");
  legend_ = new QLabel(this);
  legend_->setTextFormat(Qt::RichText);
  legend_->setWordWrap(true);
  legend_->setToolTip("Op colours; hover an op for its details");
  auto* controls = new QHBoxLayout;
  const std::pair<const char*, double> zooms[] = {{"Zoom in", 2.0}, {"Zoom out", 0.5}};
  for (const auto& [name, factor] : zooms) {
    auto* button = new QPushButton(name, this);
    button->setFocusPolicy(Qt::NoFocus);
    connect(button, &QPushButton::clicked, this, [this, f = factor] { view_->zoom(f); });
    controls->addWidget(button);
  }
  auto* fit = new QPushButton("Fit", this);
  fit->setFocusPolicy(Qt::NoFocus);
  connect(fit, &QPushButton::clicked, view_, &TimelineView::fit);
  controls->addWidget(fit);
  controls->addSpacing(12);
  ranks_ = new QSpinBox(this);
  ranks_->setRange(1, TimelineGeometry{}.max_ranks);
  ranks_->setValue(view_->max_ranks());
  ranks_->setPrefix("ranks shown: ");
  ranks_->setToolTip(
      "Rows for this many ranks (a predicted trace's ranks are identical: one shows it all; a "
      "loaded trace shows each of its ranks)");
  connect(ranks_, &QSpinBox::valueChanged, view_, &TimelineView::set_max_ranks);
  controls->addWidget(ranks_);
  filter_ = new QLineEdit(this);
  filter_->setPlaceholderText("filter: op kind or layer");
  filter_->setClearButtonEnabled(true);
  filter_->setToolTip(
      "Ops whose kind or layer contains this stay, the others fade (all_gather, h.3, nvme, ...); "
      "Enter moves the step cursor to the next one");
  matches_ = new QLabel(this);
  connect(filter_, &QLineEdit::textChanged, view_, &TimelineView::set_filter);
  connect(view_, &TimelineView::matchesChanged, this, &TimelinePage::show_matches);
  // Enter: the step cursor (and the chart) to the next op the filter keeps.
  connect(filter_, &QLineEdit::returnPressed, this, [this] {
    const std::int64_t next = view_->next_match(session_.step());
    if (next >= 0) session_.set_step(next);
  });
  controls->addWidget(filter_);
  controls->addWidget(matches_);
  controls->addWidget(source_);
  controls->addStretch();
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addLayout(controls);
  layout->addWidget(summary_);
  layout->addWidget(legend_);
  layout->addWidget(view_, 1);
  connect(source_, &QComboBox::currentIndexChanged, this,
          [this](int index) { view_->set_use_loaded(index == 1); });
  connect(&session_, &Session::traceChanged, this, &TimelinePage::sync_source);
  connect(&session_, &Session::planChanged, this, &TimelinePage::sync_source);
  sync_source();
}

void TimelinePage::show_matches() {
  const auto count = view_->matches().size();
  matches_->setText(view_->filter().isEmpty() ? QString()
                    : count == 0
                        ? QString("no op matches")
                        : QString("%1 op%2 (Enter: next)").arg(count).arg(count == 1 ? "" : "s"));
}

void TimelinePage::sync_source() {
  const bool loaded = session_.loaded() != nullptr;
  {
    const QSignalBlocker block(source_);
    source_->setEnabled(loaded);
    source_->setCurrentIndex(loaded ? 1 : 0);
  }
  view_->set_use_loaded(loaded);
  // A loaded (measured) trace's ranks differ: show each of them; a prediction's are identical.
  ranks_->setValue(loaded ? std::min(ranks_->maximum(), int(session_.loaded()->trace.ranks.size()))
                          : 1);
  const Trace* trace = view_->shown_trace();
  if (!trace) return;
  legend_->setText(timeline_legend(*trace));
  const TimeUnit unit =
      time_unit_for(trace->summary.step_time > 0 ? trace->summary.step_time : 1e-3);
  summary_->setText(QString("step %1 %2, exposed communication %3 %2, exposed offload %4 %2 "
                            "(Ctrl+wheel or W/S: zoom, drag or A/D: pan, click: move the cursor)")
                        .arg(trace->summary.step_time * unit.per_second, 0, 'f', 2)
                        .arg(unit.name)
                        .arg(trace->summary.exposed_communication * unit.per_second, 0, 'f', 2)
                        .arg(trace->summary.exposed_offload * unit.per_second, 0, 'f', 2));
}

}  // namespace zerolens::gui
