#include "gui/timeline_scene.hpp"

#include <QBrush>
#include <QFont>
#include <QGraphicsSimpleTextItem>
#include <QPen>
#include <algorithm>
#include <cmath>
#include <map>

#include "gui/op_words.hpp"
#include "gui/palette.hpp"

namespace zerolens::gui {
namespace {

constexpr double kAxisHeight = 26;
// Pixels: an op is never drawn narrower (it would vanish); narrow ops closer than the gap merge
// into one item, as Perfetto merges slices when zoomed out.
constexpr double kMinOpWidth = 2;
constexpr double kMergeGap = 2;
// The TP group's collectives and the EP group's exchanges beside the compute stream that waits
// for them; the exposed lane last.
const char* const kStreamOrder[] = {"compute", "tp",   "ep",  "collective", "h2d",
                                    "d2h",     "nvme", "cpu", "exposed"};
const char* const kExposedRow = "exposed";

int stream_rank(const std::string& stream) {
  for (int i = 0; i < int(std::size(kStreamOrder)); ++i) {
    if (stream == kStreamOrder[i]) return i;
  }
  return int(std::size(kStreamOrder));  // unknown streams of a measured trace go last, by name
}

// Rows: (rank, stream) pairs present in the trace, ranks in the trace's order, streams in
// kStreamOrder.
std::vector<int> shown_ranks(const Trace& trace, int max_ranks) {
  return {trace.ranks.begin(),
          trace.ranks.begin() + std::min<std::ptrdiff_t>(max_ranks, std::ssize(trace.ranks))};
}

std::map<std::pair<int, std::string>, int> make_rows(const Trace& trace,
                                                     const std::vector<int>& ranks,
                                                     const std::map<int, ExposedIntervals>& exposed,
                                                     const TimelineGeometry& g,
                                                     std::vector<QString>& names) {
  std::vector<std::pair<int, std::string>> keys;
  for (const auto& op : trace.ops) {
    if (std::find(ranks.begin(), ranks.end(), op.rank) == ranks.end()) continue;
    const std::pair<int, std::string> key{op.rank, op.stream};
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  }
  for (const auto& [rank, intervals] : exposed)
    if (!intervals.communication.empty() || !intervals.offload.empty())
      keys.emplace_back(rank, kExposedRow);
  auto order = [&](const auto& key) {
    const auto position = std::find(ranks.begin(), ranks.end(), key.first) - ranks.begin();
    return std::make_tuple(position, stream_rank(key.second), key.second);
  };
  std::sort(keys.begin(), keys.end(),
            [&](const auto& a, const auto& b) { return order(a) < order(b); });
  std::map<std::pair<int, std::string>, int> rows;
  for (const auto& key : keys) {
    rows[key] = int(names.size());
    names.push_back(timeline_rank_name(key.first, g) + " " + QString::fromStdString(key.second));
  }
  return rows;
}

double nice_tick(double span) {
  const double raw = span / 10;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0}) {
    if (factor * power >= raw) return factor * power;
  }
  return 10 * power;
}

// Pixels between ticks, about: ticks follow the zoom (a tick every 2 s of a 19 s step at full
// width, every 2 ms zoomed in a thousandfold).
constexpr double kTickPixels = 100;

}  // namespace

void draw_time_axis(QGraphicsScene& scene, TimelineItems& items, double left, double right) {
  for (QGraphicsItem* item : items.axis) delete item;
  items.axis.clear();
  const double pps = items.pixels_per_second;
  if (!(items.end_time > 0) || !(pps > 0)) return;
  const TimeUnit unit = time_unit_for(items.end_time);
  const double tick = nice_tick(kTickPixels * 10 / pps);
  // As many decimals as the tick needs in the axis's unit ("9.502 s").
  const int decimals = std::clamp(int(std::ceil(-std::log10(tick * unit.per_second) - 1e-9)), 0, 9);
  const double tick_pixels = tick * pps;
  const auto first =
      std::int64_t(std::max(0.0, std::floor((left - items.label_width) / tick_pixels)));
  for (std::int64_t i = first;; ++i) {
    const double seconds = double(i) * tick;
    const double x = items.label_width + double(i) * tick_pixels;
    if (x > right || seconds > items.end_time * 1.0001) break;
    auto* line = scene.addLine(x, kAxisHeight - 4, x, kAxisHeight + items.rows_height,
                               QPen(QColor(0xe0e0e0), 0));
    line->setZValue(-1);  // under the ops
    auto* label = scene.addSimpleText(
        QString("%1 %2").arg(seconds * unit.per_second, 0, 'f', decimals).arg(unit.name));
    label->setPos(x + 2, 4);
    items.axis.push_back(line);
    items.axis.push_back(label);
  }
}

namespace {

QString op_tooltip(const TraceOp& op, const TimelineGeometry& g) {
  std::string text = op.kind + (op.layer_name.empty() ? "" : " " + op.layer_name) + " (op " +
                     std::to_string(op.index + 1) + ", " +
                     timeline_rank_name(op.rank, g).toStdString() + ")\n";
  const TimeUnit unit = time_unit_for(op.duration > 0 ? op.duration : 1e-6);
  text += "start " + std::to_string(op.start * 1e3) + " ms, " +
          std::to_string(op.duration * unit.per_second) + " " + unit.name;
  if (op.bytes > 0) text += ", " + human_bytes(op.bytes);
  if (op.stream == "tp")
    text += "\nover the rank's tensor-parallel group (" + std::to_string(op.group_size) + " ranks)";
  if (op.stream == "ep")
    text += "\nover the rank's expert-parallel group (" + std::to_string(op.group_size) + " ranks)";
  return QString::fromStdString(text);
}

void add_label(QGraphicsRectItem* item, const QString& name, double x, double y, double width) {
  if (width <= 46) return;
  auto* text = new QGraphicsSimpleTextItem(name, item);
  QFont font = text->font();
  font.setPointSize(7);
  text->setFont(font);
  text->setBrush(Qt::white);
  text->setPos(x + 3, y + 4);
  if (text->boundingRect().width() > width - 4) delete text;
}

QGraphicsRectItem* add_op(QGraphicsScene& scene, const TraceOp& op, double y,
                          const TimelineGeometry& g) {
  const double x = g.label_width + op.start * g.pixels_per_second;
  const double width = std::max(kMinOpWidth, op.duration * g.pixels_per_second);
  const QRectF rect(x, y + 2, width, g.row_height - 4);
  auto* item = scene.addRect(rect, op_pen(rect), QBrush(op_colour(op.kind, op.stream)));
  item->setData(item_key::Role, int(ItemRole::Op));
  item->setData(item_key::Rank, op.rank);
  item->setData(item_key::Op, qlonglong(op.index));
  item->setData(item_key::Ops, 1);
  item->setToolTip(op_tooltip(op, g));
  add_label(item, QString::fromStdString(op.layer_name.empty() ? op.kind : op.layer_name), x, y,
            width);
  return item;
}

QString merged_tooltip(const std::vector<const TraceOp*>& ops) {
  std::map<std::string, int> kinds;
  for (const auto* op : ops) ++kinds[op->kind];
  QString text =
      QString("%1 ops, merged at this zoom (zoom in to tell them apart):").arg(ops.size());
  for (const auto& [kind, count] : kinds)
    text += QString("\n  %1 x %2").arg(QString::fromStdString(kind)).arg(count);
  const auto layer = [](const TraceOp* op) {
    return QString::fromStdString(op->layer_name.empty() ? op->kind : op->layer_name);
  };
  const double end = ops.back()->start + ops.back()->duration;
  return text + QString("\nfrom %1 (op %2) to %3 (op %4), %5 ms to %6 ms")
                    .arg(layer(ops.front()))
                    .arg(ops.front()->index + 1)
                    .arg(layer(ops.back()))
                    .arg(ops.back()->index + 1)
                    .arg(ops.front()->start * 1e3, 0, 'f', 3)
                    .arg(end * 1e3, 0, 'f', 3);
}

// Several narrow ops of one row as one item: the colour of the commonest kind, dotted.
QGraphicsRectItem* add_merged(QGraphicsScene& scene, const std::vector<const TraceOp*>& ops,
                              double y, const TimelineGeometry& g) {
  std::map<std::pair<std::string, std::string>, int> kinds;
  double end = 0;
  for (const auto* op : ops)
    ++kinds[{op->kind, op->stream}], end = std::max(end, op->start + op->duration);
  const auto commonest = std::max_element(
      kinds.begin(), kinds.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  const double x = g.label_width + ops.front()->start * g.pixels_per_second;
  const double width = std::max(kMinOpWidth, (end - ops.front()->start) * g.pixels_per_second);
  const QRectF rect(x, y + 2, width, g.row_height - 4);
  auto* item = scene.addRect(
      rect, op_pen(rect),
      QBrush(op_colour(commonest->first.first, commonest->first.second), Qt::Dense2Pattern));
  item->setData(item_key::Role, int(ItemRole::Op));
  item->setData(item_key::Rank, ops.front()->rank);
  item->setData(item_key::Op, qlonglong(ops.front()->index));
  item->setData(item_key::Ops, int(ops.size()));
  item->setToolTip(merged_tooltip(ops));
  return item;
}

// One row's ops: wide ones alone, runs of narrow neighbours merged.
void add_row_ops(QGraphicsScene& scene, std::vector<const TraceOp*> ops, double y,
                 const TimelineGeometry& g, TimelineItems& items) {
  std::stable_sort(ops.begin(), ops.end(),
                   [](const auto* a, const auto* b) { return a->start < b->start; });
  std::vector<const TraceOp*> run;
  double run_end = 0;
  const auto flush = [&] {
    if (run.empty()) return;
    QGraphicsRectItem* item =
        run.size() == 1 ? add_op(scene, *run.front(), y, g) : add_merged(scene, run, y, g);
    for (const auto* op : run) items.by_index[op->index].push_back(item);
    run.clear();
  };
  for (const auto* op : ops) {
    const bool narrow = op->duration * g.pixels_per_second < kMinOpWidth;
    if (!narrow || run.empty() || (op->start - run_end) * g.pixels_per_second > kMergeGap) flush();
    if (!narrow) {
      run.push_back(op);
      flush();
      continue;
    }
    if (run.empty()) run_end = op->start;
    run.push_back(op);
    run_end = std::max(run_end, op->start + op->duration);
  }
  flush();
}

void add_exposed(QGraphicsScene& scene, const Intervals& intervals, bool offload, int rank,
                 double y, const TimelineGeometry& g) {
  const QColor colour = offload ? QColor(0x9467bd) : QColor(0xd62728);
  for (const auto& [start, end] : intervals) {
    const double x = g.label_width + start * g.pixels_per_second;
    const QRectF rect(x, y + 5, std::max(1.0, (end - start) * g.pixels_per_second),
                      g.row_height - 10);
    auto* item = scene.addRect(rect, Qt::NoPen, QBrush(colour));
    item->setData(item_key::Role, int(ItemRole::Exposed));
    item->setData(item_key::Rank, rank);
    item->setData(item_key::Seconds, end - start);
    item->setToolTip(QString("exposed %1: %2 ms from %3 ms (%4 busy while compute idles)")
                         .arg(offload ? "offload" : "communication")
                         .arg((end - start) * 1e3, 0, 'f', 3)
                         .arg(start * 1e3, 0, 'f', 3)
                         .arg(offload ? "PCIe copies, NVMe or the CPU optimizer" : "collectives"));
  }
}

// A row's background: alternate rows shaded, the tensor-parallel group's stream tinted in its
// colour (transparent: none).
QColor band_colour(const QString& name, std::size_t r) {
  if (name.endsWith(" tp")) {
    QColor tint = tensor_parallel_colour();
    tint.setAlpha(r % 2 == 0 ? 30 : 20);
    return tint;
  }
  return r % 2 == 0 ? QColor(0xf4f6f8) : QColor(Qt::transparent);
}

void add_row_band(QGraphicsScene& scene, const QString& name, std::size_t r,
                  const TimelineGeometry& g, double end_time) {
  const double y = kAxisHeight + double(r) * g.row_height;
  const QRectF band(0, y, g.label_width + end_time * g.pixels_per_second + 20, g.row_height);
  const QColor colour = band_colour(name, r);
  if (colour.alpha() > 0) scene.addRect(band, Qt::NoPen, QBrush(colour));
}

// The rows' names on an opaque column over the ops (each row's band colour on white), a child of
// one item the view moves with its scrolling.
QGraphicsItem* add_row_labels(QGraphicsScene& scene, const std::vector<QString>& rows,
                              const TimelineGeometry& g) {
  const double height = double(rows.size()) * g.row_height;
  auto* column = scene.addRect(QRectF(0, kAxisHeight, g.label_width - 4, height),
                               QPen(QColor(0xd0d0d0), 0), QBrush(Qt::white));
  column->setZValue(4);  // over the ops and the cursor
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const double y = kAxisHeight + double(r) * g.row_height;
    const QColor colour = band_colour(rows[r], r);
    if (colour.alpha() > 0) {
      auto* band = new QGraphicsRectItem(QRectF(0, y, g.label_width - 4, g.row_height), column);
      band->setPen(Qt::NoPen);
      band->setBrush(colour);
    }
    auto* label = new QGraphicsSimpleTextItem(rows[r], column);
    label->setPos(6, y + 3);
    label->setData(item_key::Role, int(ItemRole::RowLabel));
    if (rows[r].endsWith(" tp")) label->setBrush(tensor_parallel_colour().darker(170));
    if (rows[r].endsWith(QString(" ") + kExposedRow)) label->setBrush(QColor(0xd62728).darker(130));
  }
  return column;
}

}  // namespace

QPen op_pen(const QRectF& rect) {
  // A white gap between ops wide enough to show one; a narrower op would be all border.
  return rect.width() >= 3 ? QPen(QColor(255, 255, 255), 0) : QPen(Qt::NoPen);
}

QString timeline_rank_name(int trace_rank, const TimelineGeometry& geometry) {
  if (geometry.tp_size <= 1) return QString("rank %1").arg(trace_rank);
  return QString("rank %1 (tp %2, dp %3)")
      .arg(trace_rank * geometry.tp_size + geometry.tp_index)
      .arg(geometry.tp_index)
      .arg(trace_rank);
}

void pin_row_labels(const TimelineItems& items, double left) {
  if (items.row_labels) items.row_labels->setX(std::max(0.0, left));
}

double trace_end_time(const Trace& trace) {
  double end = 0;
  for (const auto& op : trace.ops) end = std::max(end, op.start + op.duration);
  return end;
}

TimeUnit time_unit_for(double seconds) {
  if (seconds < 1e-3) return {1e6, "us"};
  if (seconds < 10) return {1e3, "ms"};
  return {1, "s"};
}

// ZeRO-Offload's delayed parameter update: the step's CPU update is the previous step's, drawn on
// the CPU lane beside this step's forward and backward; it says so.
void mark_delayed_update(const Trace& trace, TimelineItems& items) {
  if (!trace.run.inputs || !trace.run.inputs->config.zero.delay_param_update) return;
  for (const auto& op : trace.ops) {
    if (op.kind != "optimizer_step" || op.stream != "cpu") continue;
    const auto drawn = items.by_index.find(op.index);
    if (drawn == items.by_index.end()) continue;
    for (QGraphicsRectItem* item : drawn->second) {
      if (item->data(item_key::Ops).toInt() != 1) continue;
      item->setToolTip(item->toolTip() +
                       "\ndelayed parameter update: the previous step's gradients, updated on the "
                       "CPU while the GPU runs this step's forward and backward");
      for (QGraphicsItem* child : item->childItems()) {  // its label, where it has room
        auto* text = dynamic_cast<QGraphicsSimpleTextItem*>(child);
        if (!text) continue;
        for (const char* words : {"delayed update (previous step)", "delayed update"}) {
          text->setText(words);
          if (text->boundingRect().width() <= item->rect().width() - 4) break;
        }
        if (text->boundingRect().width() > item->rect().width() - 4)
          text->setText("optimizer_step");
      }
    }
  }
}

TimelineItems build_timeline_scene(QGraphicsScene& scene, const Trace& trace,
                                   const TimelineGeometry& g) {
  scene.clear();
  TimelineItems items;
  const std::vector<int> ranks = shown_ranks(trace, g.max_ranks);
  std::map<int, ExposedIntervals> exposed;
  for (const int rank : ranks) exposed[rank] = trace_exposed_intervals(trace, rank);
  const auto rows = make_rows(trace, ranks, exposed, g, items.rows);
  items.end_time = trace_end_time(trace);
  items.label_width = g.label_width;
  const double height = double(items.rows.size()) * g.row_height;
  items.pixels_per_second = g.pixels_per_second;
  items.rows_height = height;
  // The view redraws the ticks it shows as it scrolls (draw_time_axis); a scene on its own gets
  // the first screens' worth.
  draw_time_axis(scene, items, 0, g.label_width + 4000);
  for (std::size_t r = 0; r < items.rows.size(); ++r)
    add_row_band(scene, items.rows[r], r, g, items.end_time);
  std::map<int, std::vector<const TraceOp*>> row_ops;
  for (const auto& op : trace.ops) {
    const auto row = rows.find({op.rank, op.stream});
    if (row != rows.end()) row_ops[row->second].push_back(&op);
  }
  for (auto& [row, ops] : row_ops)
    add_row_ops(scene, std::move(ops), kAxisHeight + double(row) * g.row_height, g, items);
  for (const auto& [rank, intervals] : exposed) {
    const auto row = rows.find({rank, kExposedRow});
    if (row == rows.end()) continue;
    const double y = kAxisHeight + double(row->second) * g.row_height;
    add_exposed(scene, intervals.communication, false, rank, y, g);
    add_exposed(scene, intervals.offload, true, rank, y, g);
  }
  mark_delayed_update(trace, items);
  items.row_labels = add_row_labels(scene, items.rows, g);
  items.cursor = scene.addLine(g.label_width, kAxisHeight, g.label_width, kAxisHeight + height,
                               QPen(QColor(0xd62728), 1.5));
  items.cursor->setZValue(3);
  scene.setSceneRect(QRectF(0, 0, g.label_width + items.end_time * g.pixels_per_second + 40,
                            kAxisHeight + height + 10));
  return items;
}

QString timeline_legend(const Trace& trace) {
  std::vector<std::pair<std::string, std::string>> kinds;  // (kind, stream) in order of appearance
  for (const auto& op : trace.ops) {
    const std::pair<std::string, std::string> key{op.kind, op.stream == "tp" ? "tp" : ""};
    if (std::find(kinds.begin(), kinds.end(), key) == kinds.end()) kinds.push_back(key);
  }
  QString html;
  const auto swatch = [&](const QColor& colour, const QString& name) {
    html +=
        QString(
            "<span style=\"background-color:%1\">&nbsp;&nbsp;&nbsp;</span>&nbsp;%2&nbsp;&nbsp; ")
            .arg(colour.name(), name.toHtmlEscaped());
  };
  // Kinds that share a colour share a swatch ("overflow_check / grad_norm").
  std::vector<std::pair<QColor, QString>> swatches;
  for (const auto& [kind, stream] : kinds) {
    const std::string name =
        kind == "recv" ? "recv (pipeline bubble: waiting for the neighbouring stage)" : kind;
    const QString label = QString::fromStdString(stream.empty() ? name : name + " (tp)");
    const QColor colour = op_colour(kind, stream);
    const auto same = std::find_if(swatches.begin(), swatches.end(),
                                   [&](const auto& entry) { return entry.first == colour; });
    if (same == swatches.end())
      swatches.emplace_back(colour, label);
    else
      same->second += " / " + label;
  }
  for (const auto& [colour, label] : swatches) swatch(colour, label);
  swatch(QColor(0xd62728), "exposed communication");
  swatch(QColor(0x9467bd), "exposed offload");
  return html + "<i>dotted: ops merged at this zoom</i>";
}

}  // namespace zerolens::gui
