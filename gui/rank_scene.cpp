#include "gui/rank_scene.hpp"

#include <QBrush>
#include <QFont>
#include <QGraphicsRectItem>
#include <QGraphicsSimpleTextItem>
#include <QGraphicsTextItem>
#include <QPen>
#include <algorithm>
#include <optional>

#include "gui/op_words.hpp"
#include "gui/ownership.hpp"
#include "gui/palette.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens::gui {
namespace {

constexpr double kGpuWidth = 60;
constexpr double kSideWidth = 32;
constexpr double kBarGap = 6;
constexpr double kColumnGap = 30;

// Bottom to top: fixed overhead, model states, activations, then the transient buffers, so what an
// op allocates or frees shows at the top of the stack.
constexpr std::array kStackOrder = {Component::CudaContext,
                                    Component::LibraryWorkspace,
                                    Component::Fragmentation,
                                    Component::ParamsFull,
                                    Component::ParamsPartition,
                                    Component::ParamsPersistent,
                                    Component::ParamsSecondary,
                                    Component::ParamsQuantizationState,
                                    Component::GradsFull,
                                    Component::GradsPartition,
                                    Component::MasterPartition,
                                    Component::OptimizerStatePartition,
                                    Component::ActivationCheckpoints,
                                    Component::ActivationsStored,
                                    Component::ActivationWorking,
                                    Component::GatheredParams,
                                    Component::UnreducedGrads,
                                    Component::ReduceBucket,
                                    Component::Fp32GradCast,
                                    Component::OptimizerTemporaries,
                                    Component::DequantizedWeight,
                                    Component::OffloadStaging,
                                    Component::NvmeSwapBuffers};
static_assert(kStackOrder.size() == kComponentCount);

struct Drawing {
  QGraphicsScene& scene;
  const Planned& planned;
  std::int64_t step;
  const RankViewOptions& options;
  RankLayout& layout;

  const ComponentBytes& now(Device d) const { return planned.state_at(step)[std::size_t(d)]; }
  const ComponentBytes& before(Device d) const {
    return planned.state_at(step - 1)[std::size_t(d)];
  }
};

Bytes drawn_total(const ComponentBytes& components, ShowMemory show) {
  Bytes total = 0;
  for (int c = 0; c < kComponentCount; ++c) {
    if (shows(show, Component(c))) total += components[std::size_t(c)];
  }
  return total;
}

Bytes capacity_per_rank(const Plan& plan, Device device) {
  const DeviceReport& report = plan.device(device);
  return report.capacity / std::max(1, report.ranks_sharing);
}

void fill_scale(RankLayout& layout, const Planned& planned, const RankViewOptions& options) {
  std::array<Bytes, kDeviceCount> peak{};
  for (const auto& state : planned.states) {
    for (int d = 0; d < kDeviceCount; ++d) {
      peak[std::size_t(d)] =
          std::max(peak[std::size_t(d)], drawn_total(state[std::size_t(d)], options.show));
    }
  }
  for (int d = 0; d < kDeviceCount; ++d) {
    const auto i = std::size_t(d);
    layout.capacity[i] = capacity_per_rank(planned.plan, Device(d));
    layout.devices[i] = d == int(Device::Gpu) || peak[i] > 0;
    const Bytes range =
        options.scale == ScaleMode::Capacity ? std::max(layout.capacity[i], peak[i]) : peak[i];
    const bool capacity_off_bar = options.scale == ScaleMode::Peak && layout.capacity[i] > peak[i];
    const double height = options.bar_height - (capacity_off_bar ? kCapacityNoteStrip : 0);
    layout.pixels_per_byte[i] = range > 0 ? height / double(range) : 0;
  }
  layout.bar_height = options.bar_height;
}

ColumnGeometry column_geometry(int index, int rank, const std::array<bool, kDeviceCount>& devices,
                               double bar_height) {
  double width = kGpuWidth;
  for (Device d : {Device::Cpu, Device::Nvme})
    width += devices[std::size_t(d)] ? kBarGap + kSideWidth : 0;
  ColumnGeometry column;
  column.rank = rank;
  const double left = index * (width + kColumnGap);
  column.area = QRectF(left - kColumnGap / 2 + 2, -24, width + kColumnGap - 4, bar_height + 96);
  column.bars[std::size_t(Device::Gpu)] = QRectF(left, 0, kGpuWidth, bar_height);
  double x = left + kGpuWidth;
  for (Device d : {Device::Cpu, Device::Nvme}) {
    if (!devices[std::size_t(d)]) continue;
    column.bars[std::size_t(d)] = QRectF(x + kBarGap, 0, kSideWidth, bar_height);
    x += kBarGap + kSideWidth;
  }
  return column;
}

void tag(QGraphicsItem* item, ItemRole role, int rank, Device device, int component, int owner,
         Bytes bytes) {
  item->setData(item_key::Role, int(role));
  item->setData(item_key::Rank, rank);
  item->setData(item_key::Device, int(device));
  item->setData(item_key::Component, component);
  item->setData(item_key::Owner, owner);
  item->setData(item_key::Bytes, qlonglong(bytes));
}

QGraphicsSimpleTextItem* add_text(QGraphicsScene& scene, const QString& text, QPointF at,
                                  int point_size, QColor colour = Qt::black, bool bold = false) {
  auto* item = scene.addSimpleText(text);
  QFont font = item->font();
  font.setPointSize(point_size);
  font.setBold(bold);
  item->setFont(font);
  item->setBrush(colour);
  item->setPos(at);
  return item;
}

void add_centered_text(QGraphicsScene& scene, const QString& text, const QRectF& box,
                       int point_size, bool bold = false) {
  auto* item = add_text(scene, text, box.topLeft(), point_size, Qt::black, bold);
  const QRectF bounds = item->boundingRect();
  item->setPos(box.center().x() - bounds.width() / 2, box.top());
}

QColor block_colour(const RankLayout& layout, Component component, int owner) {
  const Category category = category_of(component);
  if (owner == kNoOwner) return category_colour(category);
  return owned_colour(owner_colour(layout, owner), category);
}

const char* block_label(Component component) {
  switch (component) {
    case Component::GatheredParams:
      return "gathered";
    case Component::UnreducedGrads:
      return "new grads";
    case Component::ReduceBucket:
      return "bucket";
    case Component::ActivationCheckpoints:
      return "checkpoints";
    case Component::ActivationWorking:
      return "working";
    case Component::CudaContext:
      return "CUDA ctx";
    case Component::LibraryWorkspace:
      return "workspace";
    case Component::OffloadStaging:
      return "staging";
    case Component::NvmeSwapBuffers:
      return "swap buf";
    case Component::Fp32GradCast:
      return "fp32 grads";
    case Component::OptimizerTemporaries:
      return "optimizer temp";
    case Component::ParamsSecondary:
      return "hpZ copy";
    case Component::ParamsQuantizationState:
      return "4-bit absmax";
    case Component::DequantizedWeight:
      return "dequantized";
    default:
      return category_label(category_of(component));
  }
}

void decorate_region(Drawing& dr, const QRectF& region, Component component, bool grew) {
  if (category_of(component) == Category::Buffers) {
    dr.scene.addRect(region, Qt::NoPen, QBrush(QColor(255, 255, 255, 120), Qt::BDiagPattern));
  }
  if (sharing_of(component) != Sharing::Unshared) {
    dr.scene.addRect(QRectF(region.left(), region.top(), 5, region.height()), Qt::NoPen,
                     QBrush(category_colour(category_of(component))));
  }
  dr.scene.addRect(region, grew ? QPen(Qt::black, 2.5) : QPen(QColor(40, 40, 40, 110), 0),
                   Qt::NoBrush);
  if (region.height() >= 13 && region.width() >= 50) {
    add_centered_text(dr.scene, block_label(component),
                      region.adjusted(0, (region.height() - 13) / 2, 0, 0), 7);
  }
}

// Draws one component's bytes from `bottom` upwards, sliced by owner; returns the new top.
double add_component(Drawing& dr, const ColumnGeometry& column, Device d, Component c,
                     double bottom) {
  const Bytes bytes = dr.now(d)[std::size_t(c)];
  const QRectF bar = column.bars[std::size_t(d)];
  const double scale = dr.layout.pixels_per_byte[std::size_t(d)];
  double y = bottom;
  for (const Slice& slice :
       slices_of(c, bytes, column.dp_index, dr.layout.dp_size, dr.options.max_columns)) {
    const double height = double(slice.bytes) * scale;
    auto* item = dr.scene.addRect(QRectF(bar.left(), y - height, bar.width(), height), Qt::NoPen,
                                  QBrush(block_colour(dr.layout, c, slice.owner)));
    tag(item, ItemRole::Block, column.rank, d, int(c), slice.owner, slice.bytes);
    item->setToolTip(
        QString::fromStdString(std::string(to_string(c)) + ": " + human_bytes(slice.bytes)));
    y -= height;
  }
  const bool grew = dr.step >= 0 && bytes > dr.before(d)[std::size_t(c)];
  decorate_region(dr, QRectF(bar.left(), y, bar.width(), bottom - y), c, grew);
  return y;
}

// What the current op freed, drawn dashed above the stack.
void add_freed(Drawing& dr, const ColumnGeometry& column, Device d, double top) {
  if (dr.step < 0) return;
  const QRectF bar = column.bars[std::size_t(d)];
  double y = top;
  for (Component c : kStackOrder) {
    const Bytes freed = dr.before(d)[std::size_t(c)] - dr.now(d)[std::size_t(c)];
    if (!shows(dr.options.show, c) || freed <= 0) continue;
    const double height = double(freed) * dr.layout.pixels_per_byte[std::size_t(d)];
    QPen pen(category_colour(category_of(c)).darker(150), 1.5, Qt::DashLine);
    auto* item = dr.scene.addRect(QRectF(bar.left() + 3, y - height, bar.width() - 6, height), pen,
                                  QBrush(QColor(255, 255, 255, 0)));
    tag(item, ItemRole::Freed, column.rank, d, int(c), kNoOwner, freed);
    y -= height;
  }
  if (y < top) add_centered_text(dr.scene, "freed", QRectF(bar.left(), y - 13, bar.width(), 13), 7);
}

void add_capacity(Drawing& dr, const ColumnGeometry& column, Device d) {
  const Bytes capacity = dr.layout.capacity[std::size_t(d)];
  if (capacity <= 0) return;
  const QRectF bar = column.bars[std::size_t(d)];
  const double y = bar.bottom() - double(capacity) * dr.layout.pixels_per_byte[std::size_t(d)];
  const QPen pen(QColor(0xd62728), 2, Qt::DashLine);
  QGraphicsItem* item = nullptr;
  if (y >= bar.top() - 0.5) {
    item = dr.scene.addLine(bar.left() - 3, y, bar.right() + 3, y, pen);
  } else {  // zoomed to the peak: the capacity is above the bar, noted in the strip over the peak
    const std::string text =
        bar.width() >= kGpuWidth ? "cap " + human_bytes(capacity) + " \u2191" : "cap \u2191";
    auto* note =
        add_text(dr.scene, QString::fromStdString(text), bar.topLeft(), 6, QColor(0xd62728));
    note->setPos(bar.center().x() - note->boundingRect().width() / 2, bar.top() + 1);
    item = note;
  }
  tag(item, ItemRole::Capacity, column.rank, d, -1, kNoOwner, capacity);
  item->setToolTip(QString::fromStdString("capacity " + human_bytes(capacity)));
}

void add_footer(Drawing& dr, const ColumnGeometry& column, Device d) {
  const QRectF bar = column.bars[std::size_t(d)];
  static const char* names[] = {"GPU", "CPU", "NVMe"};
  const Bytes total = drawn_total(dr.now(d), dr.options.show);
  add_centered_text(dr.scene, names[int(d)],
                    QRectF(bar.left() - 4, bar.bottom() + 3, bar.width() + 8, 12), 8, true);
  const std::string shown = human_bytes(total);  // what is shown: the legend says so when not all
  // The side bars are narrower than their totals: NVMe's goes a line lower than the CPU's beside
  // it.
  const bool staggered = d == Device::Nvme && !column.bars[std::size_t(Device::Cpu)].isEmpty();
  add_centered_text(
      dr.scene, QString::fromStdString(shown),
      QRectF(bar.left() - 6, bar.bottom() + (staggered ? 27 : 16), bar.width() + 12, 12), 7);
}

void add_bar(Drawing& dr, const ColumnGeometry& column, Device d) {
  const QRectF bar = column.bars[std::size_t(d)];
  dr.scene.addRect(bar, QPen(QColor(0x808080), 0), QBrush(QColor(0xfafafa)));
  double top = bar.bottom();
  for (Component c : kStackOrder) {
    if (shows(dr.options.show, c) && dr.now(d)[std::size_t(c)] > 0)
      top = add_component(dr, column, d, c, top);
  }
  add_freed(dr, column, d, top);
  add_capacity(dr, column, d);
  add_footer(dr, column, d);
}

void add_column(Drawing& dr, const ColumnGeometry& column, bool selected) {
  auto* area =
      dr.scene.addRect(column.area, Qt::NoPen,
                       selected ? QBrush(QColor(0xfff3c4)) : QBrush(QColor(255, 255, 255, 1)));
  tag(area, ItemRole::Column, column.rank, Device::Gpu, -1, kNoOwner, 0);
  area->setToolTip(QString("rank %1: click to describe the step as this rank").arg(column.rank));
  for (int d = 0; d < kDeviceCount; ++d) {
    if (dr.layout.devices[std::size_t(d)]) add_bar(dr, column, Device(d));
  }
  const QRectF label(column.area.left(), column.area.bottom() - 24, column.area.width(), 16);
  const QColor colour = owner_colour(dr.layout, column.dp_index).darker(130);
  auto* text =
      add_text(dr.scene, QString("rank %1").arg(column.rank), label.topLeft(), 10, colour, true);
  text->setPos(label.center().x() - text->boundingRect().width() / 2, label.top());
  tag(text, ItemRole::RankLabel, column.rank, Device::Gpu, -1, kNoOwner, 0);
  if (dr.layout.tp_size <= 1) return;
  // The rank's (tp, dp) coordinate under its number.
  auto* place = add_text(dr.scene, coordinate_label(column.rank, dr.layout.tp_size),
                         label.topLeft() + QPointF(0, 15), 8, colour);
  place->setPos(label.center().x() - place->boundingRect().width() / 2, label.top() + 15);
  tag(place, ItemRole::RankLabel, column.rank, Device::Gpu, -1, kNoOwner, 0);
}

// A frame around the columns a collective runs over when they are not the whole data-parallel
// group: the tensor-parallel group (in its colour), or ZeRO++'s part of the data-parallel group.
void add_group_frame(Drawing& dr) {
  const bool tensor = dr.layout.group == ProcessGroup::Tensor;
  if (!tensor && dr.layout.subgroup_size == 0) return;
  std::optional<QRectF> frame;
  for (const auto& column : dr.layout.columns) {
    if (!tensor && !dr.layout.in_subgroup(column.dp_index)) continue;
    frame = frame ? frame->united(column.area) : column.area;
  }
  if (!frame) return;
  const QColor colour = tensor ? tensor_parallel_colour().darker(110) : QColor(0x8c564b);
  auto* item =
      dr.scene.addRect(frame->adjusted(-3, -3, 3, 3), QPen(colour, 2, Qt::DashLine), Qt::NoBrush);
  item->setZValue(-1);
  item->setData(item_key::Role, int(ItemRole::GroupFrame));
}

// Collectives over part of the data-parallel group: ZeRO++'s hpZ secondary group and qgZ's first
// hop, and expert parallelism's EP group (consecutive ranks, as these), or the ranks holding the
// same experts (every expert_parallel-th: DeepSpeed's _create_expert_and_data_parallel).
void set_subgroup(RankLayout& layout, const Op& op, int selected_dp, int expert_parallel) {
  if (op.group == ProcessGroup::ExpertData) {
    layout.group = op.group;
    layout.subgroup_size = std::max(1, op.group_size);
    layout.subgroup_stride = std::max(1, expert_parallel);
    layout.subgroup_first = selected_dp % layout.subgroup_stride;
    return;
  }
  if (op.group != ProcessGroup::Secondary && op.group != ProcessGroup::NodeLocal &&
      op.group != ProcessGroup::Expert)
    return;
  layout.group = op.group;
  layout.subgroup_size = std::max(1, op.group_size);
  layout.subgroup_first = selected_dp / layout.subgroup_size * layout.subgroup_size;
}

std::string run_title(const Plan& plan) {
  const ScheduleContext& c = plan.schedule.context;
  // Every GPU of the job: data x tensor x pipeline parallel.
  const std::int64_t gpus =
      std::int64_t(c.dp_size) * std::max(1, c.tensor_parallel) * std::max(1, c.pipeline_parallel);
  std::string title =
      plan.request.model.name + " (" + format_count(double(plan.request.model.parameter_count())) +
      " parameters) on " + std::to_string(gpus) + " x " + plan.request.cluster.gpu.name;
  if (c.tensor_parallel > 1 || c.pipeline_parallel > 1) {
    // Short: the legend spells the groups out.
    title += " (";
    if (c.tensor_parallel > 1)
      title += "TP " + std::to_string(c.tensor_parallel) + (c.sequence_parallel ? " with SP" : "") +
               " x ";
    if (c.pipeline_parallel > 1)
      title += "PP " + std::to_string(c.pipeline_parallel) + " (stage " +
               std::to_string(c.pipeline_stage) + " shown) x ";
    title += "DP " + std::to_string(c.dp_size) + ")";
  }
  if (c.expert_parallel > 1) title += " (EP " + std::to_string(c.expert_parallel) + ")";
  title += ", " + c.zero_stage().description();
  if (c.optimizer_device != OffloadDevice::None)
    title += ", optimizer on " + std::string(to_string(c.optimizer_device));
  if (c.param_device != OffloadDevice::None)
    title += ", parameters on " + std::string(to_string(c.param_device));
  return title + ", " + to_string(c.precision) + ", micro-batch " + std::to_string(c.micro_batch) +
         " x " + std::to_string(c.seq_len) + " tokens";
}

// The run and the op under the cursor; returns the area they take.
QRectF add_header(Drawing& dr, int selected_rank, double width) {
  auto* title = add_text(dr.scene, QString::fromStdString(run_title(dr.planned.plan)),
                         QPointF(-20, -236), 11, Qt::black, true);
  auto* caption =
      dr.scene.addText(QString::fromStdString(op_caption(dr.planned, dr.step, selected_rank)));
  QFont font = caption->font();
  font.setPointSize(10);
  caption->setFont(font);
  caption->setTextWidth(std::max(600.0, width));
  caption->setPos(-24, -214);
  return title->sceneBoundingRect().united(caption->sceneBoundingRect());
}

bool is_model_state(Category category) {
  return category == Category::Params || category == Category::Grads ||
         category == Category::MasterParams || category == Category::OptimizerStates;
}

}  // namespace

bool shows(ShowMemory show, Component component) {
  const Category category = category_of(component);
  switch (show) {
    case ShowMemory::All:
      return true;
    case ShowMemory::StatesAndCopies:
      return is_model_state(category) || component == Component::GatheredParams ||
             component == Component::UnreducedGrads || component == Component::Fp32GradCast;
    case ShowMemory::ModelStates:
      return is_model_state(category);
  }
  return true;
}

std::vector<int> representative_ranks(int dp_size, int max_columns) {
  std::vector<int> ranks;
  if (dp_size <= max_columns) {
    for (int r = 0; r < dp_size; ++r) ranks.push_back(r);
    return ranks;
  }
  for (int r = 0; r < 7; ++r) ranks.push_back(r);
  ranks.push_back(dp_size - 1);
  return ranks;
}

QColor owner_colour(const RankLayout& layout, int owner) {
  for (std::size_t i = 0; i < layout.owners.size(); ++i) {
    if (layout.owners[i] == owner) return rank_colour(int(i));
  }
  return other_ranks_colour();
}

RankCoordinate coordinate_of(int rank, int tp_size) {
  const int tp = std::max(1, tp_size);
  return {rank % tp, rank / tp};
}

QString coordinate_label(int rank, int tp_size) {
  const RankCoordinate at = coordinate_of(rank, tp_size);
  return QString("(tp %1, dp %2)").arg(at.tp).arg(at.dp);
}

std::vector<int> group_ranks(ProcessGroup group, int rank, int tp_size, int dp_size) {
  const int tp = std::max(1, tp_size);
  const RankCoordinate at = coordinate_of(rank, tp);
  std::vector<int> ranks;
  if (group == ProcessGroup::Tensor) {
    for (int t = 0; t < tp; ++t) ranks.push_back(at.dp * tp + t);
  } else {
    for (int d = 0; d < dp_size; ++d) ranks.push_back(d * tp + at.tp);
  }
  return ranks;
}

RankLayout build_rank_scene(QGraphicsScene& scene, const Planned& planned, std::int64_t step,
                            int selected_rank, const RankViewOptions& options) {
  scene.clear();
  RankLayout layout;
  const ScheduleContext& context = planned.plan.schedule.context;
  layout.dp_size = context.dp_size;
  layout.tp_size = std::max(1, context.tensor_parallel);
  fill_scale(layout, planned, options);
  layout.owners = representative_ranks(layout.dp_size, options.max_columns);
  const auto& ops = planned.plan.schedule.ops;
  if (layout.tp_size > 1 && step >= 0 && std::size_t(step) < ops.size() &&
      ops[std::size_t(step)].group == ProcessGroup::Tensor)
    layout.group = ProcessGroup::Tensor;
  // The selected rank's group: its data-parallel group (representative indices when large), or its
  // tensor-parallel group at a TP collective.
  const RankCoordinate selected = coordinate_of(selected_rank, layout.tp_size);
  if (step >= 0 && std::size_t(step) < ops.size())
    set_subgroup(layout, ops[std::size_t(step)], selected.dp, context.expert_parallel);
  const bool tensor = layout.group == ProcessGroup::Tensor;
  const std::vector<int> indices =
      representative_ranks(tensor ? layout.tp_size : layout.dp_size, options.max_columns);
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const int rank = tensor ? selected.dp * layout.tp_size + indices[i]
                            : indices[i] * layout.tp_size + selected.tp;
    ColumnGeometry column = column_geometry(int(i), rank, layout.devices, options.bar_height);
    column.dp_index = coordinate_of(rank, layout.tp_size).dp;
    layout.columns.push_back(column);
  }
  Drawing drawing{scene, planned, step, options, layout};
  for (const auto& column : layout.columns)
    add_column(drawing, column, column.rank == selected_rank);
  add_group_frame(drawing);
  // The frame holds the wider of the two groups, so the view does not jump between them.
  std::size_t widest = layout.owners.size();
  if (layout.tp_size > 1)
    widest = std::max(widest, representative_ranks(layout.tp_size, options.max_columns).size());
  const double right =
      column_geometry(int(widest) - 1, 0, layout.devices, options.bar_height).area.right();
  const QRectF header = add_header(drawing, selected_rank, right);
  add_transfers(scene, planned, step, layout);
  const double legend_bottom =
      add_legend(scene, planned, layout, options, QPointF(right + 24, -150), selected_rank);
  // A fixed frame per plan and options, so the view does not jump while the cursor moves.
  const double bottom = std::max(options.bar_height + 80, legend_bottom + 10);
  const QRectF frame(-32, -246, right + 24 + 260 + 32, bottom + 246);
  scene.setSceneRect(frame.united(header.adjusted(0, 0, 12, 0)));
  return layout;
}

}  // namespace zerolens::gui
