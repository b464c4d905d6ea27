// The rank view's legend: what the colours mean, which ranks are drawn, and the scale.
#include <QBrush>
#include <QFont>
#include <QGraphicsSimpleTextItem>
#include <QGraphicsTextItem>
#include <QPen>
#include <utility>
#include <vector>

#include "gui/op_words.hpp"
#include "gui/palette.hpp"
#include "gui/rank_scene.hpp"

namespace zerolens::gui {
namespace {

constexpr double kLineHeight = 17;
constexpr double kWidth = 250;

struct Cursor {
  QGraphicsScene& scene;
  QPointF at;

  void line(const QString& text, bool bold = false) {
    auto* item = scene.addSimpleText(text);
    QFont font = item->font();
    font.setPointSize(8);
    font.setBold(bold);
    item->setFont(font);
    item->setPos(at + QPointF(20, 0));
    at.ry() += kLineHeight;
  }
  void swatch(QColor colour, const QString& text, Qt::BrushStyle style = Qt::SolidPattern) {
    scene.addRect(QRectF(at.x(), at.y() + 2, 14, 11), QPen(QColor(0x606060), 0),
                  QBrush(colour, style));
    line(text);
  }
  // Swatches four to a row (one per rank drawn).
  void swatch_grid(const std::vector<std::pair<QColor, QString>>& entries) {
    constexpr int kPerRow = 4;
    constexpr double kCell = kWidth / kPerRow;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const QPointF cell =
          at + QPointF(double(i % kPerRow) * kCell, double(i / kPerRow) * kLineHeight);
      scene.addRect(QRectF(cell.x(), cell.y() + 2, 14, 11), QPen(QColor(0x606060), 0),
                    QBrush(entries[i].first));
      auto* item = scene.addSimpleText(entries[i].second);
      QFont font = item->font();
      font.setPointSize(8);
      item->setFont(font);
      item->setPos(cell + QPointF(18, 0));
    }
    at.ry() += double((entries.size() + kPerRow - 1) / kPerRow) * kLineHeight;
  }
  void paragraph(const QString& text) {
    auto* item = scene.addText(text);
    QFont font = item->font();
    font.setPointSize(8);
    item->setFont(font);
    item->setTextWidth(kWidth);
    item->setPos(at + QPointF(-4, 0));
    at.ry() += item->boundingRect().height() + 2;
  }
};

void add_categories(Cursor& cursor, const RankViewOptions& options) {
  cursor.line("memory (bottom to top)", true);
  for (int c = kCategoryCount - 1; c >= 0; --c) {
    const Category category = Category(c);
    bool drawn = false;
    for (int k = 0; k < kComponentCount; ++k) {
      drawn = drawn || (category_of(Component(k)) == category && shows(options.show, Component(k)));
    }
    if (drawn) cursor.swatch(category_colour(category), category_label(category));
  }
  cursor.swatch(QColor(0x8fbcd4), "transient (hatched)", Qt::BDiagPattern);
}

void add_owners(Cursor& cursor, const RankLayout& layout) {
  cursor.at.ry() += 6;
  cursor.line("owner of a partition", true);
  std::vector<std::pair<QColor, QString>> owners;
  // Partitions belong to data-parallel indices: with TP, rank r holds dp index r / tp's partition
  // of its TP shard.
  const QString name = layout.tp_size > 1 ? "dp %1" : "rank %1";
  for (int owner : layout.owners) owners.emplace_back(owner_colour(layout, owner), name.arg(owner));
  cursor.swatch_grid(owners);
  if (int(layout.owners.size()) < layout.dp_size)
    cursor.swatch(other_ranks_colour(), "the other ranks");
  cursor.paragraph(
      "A model-state block takes the colour of the rank that owns it (stripe: its category). "
      "A full copy (plain DP, a gathered layer, gradients before they are reduced) is striped "
      "with every owner's share. Thick outline: allocated by this op; dashed: freed by it.");
}

void add_scale(Cursor& cursor, const Planned& planned, const RankLayout& layout,
               const RankViewOptions& options) {
  cursor.at.ry() += 4;
  cursor.line("scale", true);
  static const char* names[] = {"GPU", "CPU", "NVMe"};
  for (int d = 0; d < kDeviceCount; ++d) {
    if (!layout.devices[std::size_t(d)] || layout.pixels_per_byte[std::size_t(d)] <= 0) continue;
    const double full = layout.bar_height / layout.pixels_per_byte[std::size_t(d)];
    cursor.line(QString("%1 bar = %2, capacity %3")
                    .arg(names[d])
                    .arg(QString::fromStdString(human_bytes(Bytes(full))))
                    .arg(QString::fromStdString(human_bytes(layout.capacity[std::size_t(d)]))));
  }
  const int ranks_per_node = planned.plan.device(Device::Cpu).ranks_sharing;
  if (layout.devices[1] || layout.devices[2]) {
    cursor.paragraph(QString("CPU and NVMe: this rank's share of its node (%1 ranks per node).")
                         .arg(ranks_per_node));
  }
  if (options.scale == ScaleMode::Peak)
    cursor.paragraph("Zoomed to the step's peak: the capacity may be off the bar.");
  if (options.show != ShowMemory::All)
    cursor.paragraph("The totals under the bars count what is shown.");
}

// With tensor parallelism: which group the columns are.
void add_groups(Cursor& cursor, const Planned& planned, const RankLayout& layout, int selected) {
  const ScheduleContext& c = planned.plan.schedule.context;
  const int world = c.dp_size * layout.tp_size;
  const RankCoordinate at = coordinate_of(selected, layout.tp_size);
  QString text = QString(
                     "Tensor parallel %1%2 x data parallel %3: %4 ranks, placed TP innermost "
                     "(rank r is tp r mod %1, dp r / %1). ")
                     .arg(layout.tp_size)
                     .arg(c.sequence_parallel ? " with sequence parallelism" : "")
                     .arg(c.dp_size)
                     .arg(world);
  if (layout.group == ProcessGroup::Tensor) {
    text += QString(
                "Drawn: the tensor-parallel group of rank %1 (dp %2), which this "
                "collective runs over; each holds its 1/%3 shard of every layer's matrices.")
                .arg(selected)
                .arg(at.dp)
                .arg(layout.tp_size);
  } else {
    text += QString(
                "Drawn: the data-parallel group of rank %1 (tp %2), over which ZeRO "
                "partitions; its tensor-parallel group is drawn at a TP collective.")
                .arg(selected)
                .arg(at.tp);
  }
  cursor.paragraph(text);
  if (layout.group == ProcessGroup::Tensor)
    cursor.swatch(tensor_parallel_colour(), "tensor-parallel group");
}

}  // namespace

double add_legend(QGraphicsScene& scene, const Planned& planned, const RankLayout& layout,
                  const RankViewOptions& options, QPointF top_left, int selected_rank) {
  Cursor cursor{scene, top_left};
  if (layout.tp_size > 1) add_groups(cursor, planned, layout, selected_rank);
  if (layout.group == ProcessGroup::Expert || layout.group == ProcessGroup::ExpertData) {
    const int last = layout.subgroup_first + (layout.subgroup_size - 1) * layout.subgroup_stride;
    cursor.paragraph(
        layout.group == ProcessGroup::Expert
            ? QString("Framed: the expert-parallel group (dp %1-%2): each of its %3 ranks holds "
                      "1/%3 of every MoE layer's experts, and the layer's tokens go to their "
                      "experts' ranks and back (all-to-all).")
                  .arg(layout.subgroup_first)
                  .arg(last)
                  .arg(layout.subgroup_size)
            : QString("Framed: the ranks holding the same experts (dp %1, %2, ... %3: every "
                      "%4th), over which ZeRO partitions and reduces the expert parameters (%5 "
                      "ranks).")
                  .arg(layout.subgroup_first)
                  .arg(layout.subgroup_first + layout.subgroup_stride)
                  .arg(last)
                  .arg(layout.subgroup_stride)
                  .arg(layout.subgroup_size));
    cursor.swatch(QColor(0x8c564b), layout.group == ProcessGroup::Expert
                                        ? "expert-parallel group"
                                        : "expert-data-parallel group");
  } else if (layout.subgroup_size > 0) {
    cursor.paragraph(
        QString(
            layout.group == ProcessGroup::Secondary
                ? "Framed: the hpZ group (dp %1-%2), the ranks of a node that each keep 1/%3 of "
                  "the secondary copy the forward made: backward gathers within it."
                : "Framed: the node's part of data parallelism (dp %1-%2): qgZ's first "
                  "all-to-all stays inside the node (%3 ranks).")
            .arg(layout.subgroup_first)
            .arg(layout.subgroup_first + layout.subgroup_size - 1)
            .arg(layout.subgroup_size));
    cursor.swatch(QColor(0x8c564b),
                  layout.group == ProcessGroup::Secondary ? "hpZ group" : "node group");
  }
  if (layout.group == ProcessGroup::Data && int(layout.columns.size()) < layout.dp_size) {
    cursor.paragraph(
        QString("%1 ranks: %2 drawn. Ranks are symmetric: every rank holds the same bytes, "
                "each owning 1/%1 of the partitioned states.")
            .arg(layout.dp_size)
            .arg(layout.columns.size()));
  }
  add_categories(cursor, options);
  add_owners(cursor, layout);
  add_scale(cursor, planned, layout, options);
  return cursor.at.y();
}

}  // namespace zerolens::gui
