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
// The TP group's collectives beside the compute stream that waits for them.
const char* const kStreamOrder[] = {"compute", "tp", "collective", "h2d", "d2h", "nvme", "cpu"};

int stream_rank(const std::string& stream) {
  for (int i = 0; i < int(std::size(kStreamOrder)); ++i) {
    if (stream == kStreamOrder[i]) return i;
  }
  return int(std::size(kStreamOrder));  // unknown streams of a measured trace go last, by name
}

// Rows: (rank, stream) pairs present in the trace, ranks in the trace's order, streams in
// kStreamOrder.
std::map<std::pair<int, std::string>, int> make_rows(const Trace& trace, int max_ranks,
                                                     std::vector<QString>& names) {
  std::vector<int> ranks(
      trace.ranks.begin(),
      trace.ranks.begin() + std::min<std::ptrdiff_t>(max_ranks, std::ssize(trace.ranks)));
  std::vector<std::pair<int, std::string>> keys;
  for (const auto& op : trace.ops) {
    if (std::find(ranks.begin(), ranks.end(), op.rank) == ranks.end()) continue;
    const std::pair<int, std::string> key{op.rank, op.stream};
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  }
  auto order = [&](const auto& key) {
    const auto position = std::find(ranks.begin(), ranks.end(), key.first) - ranks.begin();
    return std::make_tuple(position, stream_rank(key.second), key.second);
  };
  std::sort(keys.begin(), keys.end(),
            [&](const auto& a, const auto& b) { return order(a) < order(b); });
  std::map<std::pair<int, std::string>, int> rows;
  for (const auto& key : keys) {
    rows[key] = int(names.size());
    names.push_back(QString("rank %1 %2").arg(key.first).arg(QString::fromStdString(key.second)));
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

void add_axis(QGraphicsScene& scene, const TimelineGeometry& g, double end_time, double height) {
  if (!(end_time > 0)) return;
  const TimeUnit unit = time_unit_for(end_time);
  const double tick = nice_tick(end_time);
  for (int i = 0; double(i) * tick <= end_time * 1.0001 && i <= 1000; ++i) {
    const double x = g.label_width + double(i) * tick * g.pixels_per_second;
    scene.addLine(x, kAxisHeight - 4, x, kAxisHeight + height, QPen(QColor(0xe0e0e0), 0));
    auto* label = scene.addSimpleText(
        QString("%1 %2").arg(double(i) * tick * unit.per_second, 0, 'g', 4).arg(unit.name));
    label->setPos(x + 2, 4);
  }
}

QString op_tooltip(const TraceOp& op) {
  std::string text = op.kind + (op.layer_name.empty() ? "" : " " + op.layer_name) + " (op " +
                     std::to_string(op.index + 1) + ", rank " + std::to_string(op.rank) + ")\n";
  const TimeUnit unit = time_unit_for(op.duration > 0 ? op.duration : 1e-6);
  text += "start " + std::to_string(op.start * 1e3) + " ms, " +
          std::to_string(op.duration * unit.per_second) + " " + unit.name;
  if (op.bytes > 0) text += ", " + human_bytes(op.bytes);
  if (op.stream == "tp")
    text += "\nover the rank's tensor-parallel group (" + std::to_string(op.group_size) + " ranks)";
  return QString::fromStdString(text);
}

QGraphicsRectItem* add_op(QGraphicsScene& scene, const TraceOp& op, double y,
                          const TimelineGeometry& g) {
  const double x = g.label_width + op.start * g.pixels_per_second;
  const double width = std::max(1.0, op.duration * g.pixels_per_second);
  const QRectF rect(x, y + 2, width, g.row_height - 4);
  auto* item = scene.addRect(rect, op_pen(rect), QBrush(op_colour(op.kind, op.stream)));
  item->setData(item_key::Role, int(ItemRole::Op));
  item->setData(item_key::Rank, op.rank);
  item->setData(item_key::Op, qlonglong(op.index));
  item->setToolTip(op_tooltip(op));
  if (width > 46) {
    auto* text = new QGraphicsSimpleTextItem(
        QString::fromStdString(op.layer_name.empty() ? op.kind : op.layer_name), item);
    QFont font = text->font();
    font.setPointSize(7);
    text->setFont(font);
    text->setBrush(Qt::white);
    text->setPos(x + 3, y + 4);
    if (text->boundingRect().width() > width - 4) delete text;
  }
  return item;
}

}  // namespace

QPen op_pen(const QRectF& rect) {
  // A white gap between ops wide enough to show one; a narrower op would be all border.
  return rect.width() >= 3 ? QPen(QColor(255, 255, 255), 0) : QPen(Qt::NoPen);
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

TimelineItems build_timeline_scene(QGraphicsScene& scene, const Trace& trace,
                                   const TimelineGeometry& g) {
  scene.clear();
  TimelineItems items;
  const auto rows = make_rows(trace, g.max_ranks, items.rows);
  items.end_time = trace_end_time(trace);
  const double height = double(items.rows.size()) * g.row_height;
  add_axis(scene, g, items.end_time, height);
  for (std::size_t r = 0; r < items.rows.size(); ++r) {
    const double y = kAxisHeight + double(r) * g.row_height;
    const QRectF band(0, y, g.label_width + items.end_time * g.pixels_per_second + 20,
                      g.row_height);
    // The tensor-parallel group's stream is tinted in its colour.
    const bool tensor = items.rows[r].endsWith(" tp");
    if (tensor) {
      QColor tint = tensor_parallel_colour();
      tint.setAlpha(r % 2 == 0 ? 30 : 20);
      scene.addRect(band, Qt::NoPen, QBrush(tint));
    } else if (r % 2 == 0) {
      scene.addRect(band, Qt::NoPen, QBrush(QColor(0xf4f6f8)));
    }
    auto* label = scene.addSimpleText(items.rows[r]);
    label->setPos(6, y + 3);
    if (tensor) label->setBrush(tensor_parallel_colour().darker(170));
  }
  for (const auto& op : trace.ops) {
    const auto row = rows.find({op.rank, op.stream});
    if (row == rows.end()) continue;
    items.by_index[op.index].push_back(
        add_op(scene, op, kAxisHeight + double(row->second) * g.row_height, g));
  }
  items.cursor = scene.addLine(g.label_width, kAxisHeight, g.label_width, kAxisHeight + height,
                               QPen(QColor(0xd62728), 1.5));
  items.cursor->setZValue(3);
  scene.setSceneRect(QRectF(0, 0, g.label_width + items.end_time * g.pixels_per_second + 40,
                            kAxisHeight + height + 10));
  return items;
}

}  // namespace zerolens::gui
