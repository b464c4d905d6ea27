// The data the current op moves, drawn over the rank view's columns: collectives as a bus between
// the GPUs (what each rank puts in, what it gets back), host-device copies and NVMe traffic as
// arrows between a rank's bars, compute as a label over the GPU that runs it.
#include <QBrush>
#include <QFont>
#include <QGraphicsPathItem>
#include <QGraphicsSimpleTextItem>
#include <QPainterPath>
#include <QPen>
#include <cmath>
#include <limits>

#include "gui/op_words.hpp"
#include "gui/palette.hpp"
#include "gui/rank_scene.hpp"
#include "sim/schedule/comm.hpp"

namespace zerolens::gui {
namespace {

constexpr double kBusY = -118;
const QColor kNeutral(0x555555);

void tag_transfer(QGraphicsItem* item, std::int64_t step, int rank) {
  item->setData(item_key::Role, int(ItemRole::Transfer));
  item->setData(item_key::Op, qlonglong(step));
  item->setData(item_key::Rank, rank);
}

QPainterPath arrow_head(QPointF tip, QPointF from) {
  const double angle = std::atan2(tip.y() - from.y(), tip.x() - from.x());
  constexpr double kLength = 9, kSpread = 0.45;
  QPainterPath head(tip);
  head.lineTo(tip -
              QPointF(kLength * std::cos(angle - kSpread), kLength * std::sin(angle - kSpread)));
  head.lineTo(tip -
              QPointF(kLength * std::cos(angle + kSpread), kLength * std::sin(angle + kSpread)));
  head.closeSubpath();
  return head;
}

// A straight arrow, or an arc bulging upwards by `bulge` pixels.
void add_arrow(QGraphicsScene& scene, QPointF from, QPointF to, QColor colour, double bulge,
               std::int64_t step, int rank) {
  QPainterPath path(from);
  QPointF before_tip = from;
  if (bulge > 0) {
    const QPointF c1(from.x(), from.y() - bulge), c2(to.x(), to.y() - bulge);
    path.cubicTo(c1, c2, to);
    before_tip = c2;
  } else {
    path.lineTo(to);
  }
  auto* line = scene.addPath(path, QPen(colour, 3, Qt::SolidLine, Qt::RoundCap), Qt::NoBrush);
  auto* head = scene.addPath(arrow_head(to, before_tip), QPen(colour, 1), QBrush(colour));
  tag_transfer(line, step, rank);
  tag_transfer(head, step, rank);
}

QGraphicsSimpleTextItem* add_label(QGraphicsScene& scene, const QString& text, QPointF centre,
                                   int point_size, bool bold = false) {
  auto* item = scene.addSimpleText(text);
  QFont font = item->font();
  font.setPointSize(point_size);
  font.setBold(bold);
  item->setFont(font);
  item->setPos(centre.x() - item->boundingRect().width() / 2,
               centre.y() - item->boundingRect().height() / 2);
  return item;
}

const char* collective_name(OpKind kind) {
  switch (kind) {
    case OpKind::AllGather:
      return "all-gather";
    case OpKind::ReduceScatter:
      return "reduce-scatter";
    case OpKind::AllReduce:
      return "all-reduce";
    case OpKind::Broadcast:
      return "broadcast";
    case OpKind::OverflowCheck:
      return "all-reduce of the overflow flag";
    case OpKind::GradNorm:
      return "all-reduce of the gradient norm";
    default:
      return to_string(kind);
  }
}

// Up: what a rank contributes; down: what it receives. A gather sends the rank's own partition and
// returns everyone's; a reduce-scatter sends full gradients and returns the rank's reduced shard.
void add_collective(QGraphicsScene& scene, const Planned& planned, std::int64_t step,
                    const RankLayout& layout) {
  const Op& op = planned.plan.schedule.ops[std::size_t(step)];
  const bool tensor = op.group == ProcessGroup::Tensor;
  // The bus spans the columns in the collective's group (a ZeRO++ part of DP: only those).
  double left = 0, right = 0;
  bool first = true;
  for (const auto& column : layout.columns) {
    if (!tensor && !layout.in_subgroup(column.dp_index)) continue;
    left = first ? column.area.left() + 8 : left;
    right = column.area.right() - 8;
    first = false;
  }
  if (first) return;
  const QColor bus_colour = op_colour(to_string(op.kind), to_string(op.stream));
  auto* bus =
      scene.addLine(left, kBusY, right, kBusY, QPen(bus_colour, 5, Qt::SolidLine, Qt::RoundCap));
  tag_transfer(bus, step, -1);
  const LinkTraffic traffic =
      collective_traffic(op.kind, op.bytes, op_group_shape(op, planned.plan.schedule.context));
  std::string title = std::string(collective_name(op.kind)) + " of " + human_bytes(op.bytes);
  double title_y = kBusY - 14;
  if (op.group == ProcessGroup::Expert || op.group == ProcessGroup::ExpertData) {
    title += std::string("\nover ") +
             (op.group == ProcessGroup::Expert ? "its expert-parallel group ("
                                               : "the ranks holding its experts (") +
             std::to_string(op.group_size) + " ranks)";
    title_y -= 8;
  } else if (layout.subgroup_size > 0) {
    title += std::string("\nover ") +
             (op.group == ProcessGroup::Secondary ? "its hpZ group ("
                                                  : "its node's part of data parallelism (") +
             std::to_string(op.group_size) + " ranks of the node)";
    title_y -= 8;
  } else if (layout.tp_size > 1) {
    // Two lines, the second naming the group: a TP group is few columns wide.
    title += std::string("\nover the ") + (tensor ? "tensor" : "data") + "-parallel group (" +
             std::to_string(op.group_size) + " ranks)";
    title_y -= 8;
  } else {
    title += " over " + std::to_string(op.group_size) + " ranks";
  }
  auto* label = add_label(scene, QString::fromStdString(title),
                          QPointF((left + right) / 2, title_y), 9, true);
  // Over a small group the title is wider than the bus: start it at the first column.
  if (label->x() < left - 8) label->setX(left - 8);
  const bool gathers = op.kind == OpKind::AllGather || op.kind == OpKind::Broadcast;
  const bool scatters = op.kind == OpKind::ReduceScatter;
  for (const auto& column : layout.columns) {
    if (!tensor && !layout.in_subgroup(column.dp_index)) continue;  // not in this collective
    const QRectF bar = column.bars[std::size_t(Device::Gpu)];
    // ZeRO moves partitions (the owner's colour); the TP group moves activations, in its colour.
    const QColor own = tensor ? bus_colour : owner_colour(layout, column.dp_index);
    const double up_x = bar.left() + bar.width() * 0.3, down_x = bar.left() + bar.width() * 0.7;
    add_arrow(scene, QPointF(up_x, -6), QPointF(up_x, kBusY + 4), gathers ? own : kNeutral, 0, step,
              column.rank);
    add_arrow(scene, QPointF(down_x, kBusY + 4), QPointF(down_x, -6), scatters ? own : kNeutral, 0,
              step, column.rank);
    auto* sent = add_label(
        scene, QString::fromStdString(human_bytes(traffic.intra_node + traffic.inter_node)),
        QPointF(bar.center().x(), kBusY + 44), 7);
    sent->setZValue(2);
    scene.addRect(sent->sceneBoundingRect().adjusted(-2, 0, 2, 0), Qt::NoPen, QBrush(Qt::white))
        ->setZValue(1);
  }
}

void add_copy(QGraphicsScene& scene, std::int64_t step, const RankLayout& layout, Device from,
              Device to, Bytes bytes) {
  for (const auto& column : layout.columns) {
    const QRectF a = column.bars[std::size_t(from)], b = column.bars[std::size_t(to)];
    if (a.isEmpty() || b.isEmpty()) continue;
    const QColor colour =
        from == Device::Nvme || to == Device::Nvme ? op_colour("nvme_read") : op_colour("copy_h2d");
    add_arrow(scene, QPointF(a.center().x(), -6), QPointF(b.center().x(), -6), colour, 60, step,
              column.rank);
    add_label(scene, QString::fromStdString(human_bytes(bytes)),
              QPointF((a.center().x() + b.center().x()) / 2, -62), 7);
  }
}

const char* activity_name(OpKind kind) {
  switch (kind) {
    case OpKind::Forward:
      return "forward";
    case OpKind::Backward:
      return "backward";
    case OpKind::Recompute:
      return "recompute";
    case OpKind::Release:
      return "release";
    case OpKind::OptimizerStep:
      return "update";
    case OpKind::LossScaleUpdate:
      return "loss scale";
    default:
      return to_string(kind);
  }
}

QRectF activity_bar(const ColumnGeometry& column, Device where) {
  QRectF bar = column.bars[std::size_t(where)];
  return bar.isEmpty() ? column.bars[std::size_t(Device::Gpu)] : bar;
}

// The op every rank runs (a compute, a release, the update) in a box above each rank's bar, or,
// where those boxes would run into each other, once in a banner over all the columns.
void add_activity(QGraphicsScene& scene, const Planned& planned, std::int64_t step,
                  const RankLayout& layout) {
  const Op& op = planned.plan.schedule.ops[std::size_t(step)];
  const Device where = op.stream == Stream::Cpu ? Device::Cpu : Device::Gpu;
  const auto& layers = planned.plan.rank_model.layers;
  std::string text = activity_name(op.kind);
  if (op.layer >= 0 && std::size_t(op.layer) < layers.size())
    text += " " + layers[std::size_t(op.layer)].name;
  std::vector<QPointF> centres;
  for (const auto& column : layout.columns)
    centres.emplace_back(activity_bar(column, where).center().x(), -30);
  auto* probe = add_label(scene, QString::fromStdString(text), centres.front(), 8, true);
  const double width = probe->boundingRect().width() + 8;
  delete probe;
  double pitch = std::numeric_limits<double>::infinity();
  for (std::size_t i = 1; i < centres.size(); ++i)
    pitch = std::min(pitch, std::abs(centres[i].x() - centres[i - 1].x()));
  const bool banner = width + 4 > pitch;
  if (banner) centres = {QPointF((centres.front().x() + centres.back().x()) / 2, -30)};
  for (std::size_t i = 0; i < centres.size(); ++i) {
    auto* label = add_label(scene, QString::fromStdString(banner ? text + " (every rank)" : text),
                            centres[i], 8, true);
    const QRectF box = label->mapRectToScene(label->boundingRect()).adjusted(-4, -2, 4, 2);
    auto* background = scene.addRect(box, QPen(op_colour(to_string(op.kind)).darker(130), 1.5),
                                     QBrush(op_colour(to_string(op.kind)).lighter(170)));
    label->setZValue(2);
    background->setZValue(1);
    tag_transfer(background, step, layout.columns[i].rank);
  }
}

}  // namespace

void add_transfers(QGraphicsScene& scene, const Planned& planned, std::int64_t step,
                   const RankLayout& layout) {
  if (step < 0 || layout.columns.empty()) return;
  const Op& op = planned.plan.schedule.ops.at(std::size_t(step));
  switch (op.link) {
    case Link::Network:
      add_collective(scene, planned, step, layout);
      return;
    case Link::PcieH2D:
      add_copy(scene, step, layout, Device::Cpu, Device::Gpu, op.bytes);
      return;
    case Link::PcieD2H:
      add_copy(scene, step, layout, Device::Gpu, Device::Cpu, op.bytes);
      return;
    case Link::NvmeRead:
      add_copy(scene, step, layout, Device::Nvme, Device::Cpu, op.bytes);
      return;
    case Link::NvmeWrite:
      add_copy(scene, step, layout, Device::Cpu, Device::Nvme, op.bytes);
      return;
    case Link::None:
      add_activity(scene, planned, step, layout);
      return;
  }
}

}  // namespace zerolens::gui
