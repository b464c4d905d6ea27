#pragma once
// The rank view's scene: one column per rank, each GPU drawn as its memory at the step cursor
// stacked by component, model-state blocks coloured by the rank that owns the partition, CPU and
// NVMe beside when they hold anything, each device's capacity, and the data the current op moves.
// Every block carries its rank, device, component, owner and bytes as item data, so tests measure
// the drawing against the schedule.
//
// With tensor parallelism the columns are the data-parallel group of the selected rank (ZeRO's
// ranks: partitions are owned by data-parallel indices), or its tensor-parallel group while the
// cursor is on a TP collective; each column is labelled with its (tp, dp) coordinate.
#include <QGraphicsScene>
#include <QRectF>
#include <array>
#include <vector>

#include "gui/scene_items.hpp"
#include "gui/session.hpp"

namespace zerolens::gui {

// All memory; the model states with their transient copies (stage-3 gathered layers, gradients
// before they are reduced, the fp32 gradient cast); the model states only.
enum class ShowMemory { All, StatesAndCopies, ModelStates };
enum class ScaleMode { Capacity, Peak };

// Zoomed to the peak with the capacity above it, a bar keeps this strip (scene units) above the
// step's peak for the capacity's note (its first line) and a "freed" label over what the op freed
// (the second), so the note never lies on the blocks.
inline constexpr double kCapacityNoteStrip = 26;

struct RankViewOptions {
  ShowMemory show = ShowMemory::All;
  ScaleMode scale = ScaleMode::Capacity;
  int max_columns = 16;     // more ranks: representative ones
  double bar_height = 440;  // scene units; the view fits it to the window's shape
};

// Where a rank sits in the job. Ranks are placed tensor-parallel innermost (Megatron's order):
// global rank r is TP index r % tp of data-parallel index r / tp.
struct RankCoordinate {
  int tp = 0;
  int dp = 0;
  bool operator==(const RankCoordinate&) const = default;
};
RankCoordinate coordinate_of(int rank, int tp_size);
// "(tp 1, dp 2)"
QString coordinate_label(int rank, int tp_size);
// The group `op` runs over with `rank` in it, in rank order: its tensor-parallel group for a TP
// collective, else its data-parallel group.
std::vector<int> group_ranks(ProcessGroup group, int rank, int tp_size, int dp_size);

struct ColumnGeometry {
  int rank = 0;                           // global rank
  int dp_index = 0;                       // its data-parallel index: the owner of its partitions
  QRectF area;                            // the whole column (clicks select its rank)
  std::array<QRectF, kDeviceCount> bars;  // full-height bar per device; empty when not drawn
};

struct RankLayout {
  std::vector<ColumnGeometry> columns;
  std::array<bool, kDeviceCount> devices{};    // devices drawn
  std::array<Bytes, kDeviceCount> capacity{};  // per rank (CPU, NVMe: the rank's share of its node)
  std::array<double, kDeviceCount> pixels_per_byte{};
  double bar_height = 0;
  int dp_size = 1;
  int tp_size = 1;
  ProcessGroup group = ProcessGroup::Data;  // the group the columns are
  // At a collective of a part of the data-parallel group (ZeRO++: hpZ's secondary group, qgZ's
  // node-local hop; expert parallelism: the EP group, or the ranks holding the same experts, every
  // stride-th), the data-parallel indices it spans: subgroup_size of them from subgroup_first,
  // subgroup_stride apart; size 0: none.
  int subgroup_first = 0, subgroup_size = 0, subgroup_stride = 1;
  bool in_subgroup(int dp_index) const {
    if (subgroup_size == 0) return true;
    const int offset = dp_index - subgroup_first;
    return offset >= 0 && offset % subgroup_stride == 0 && offset / subgroup_stride < subgroup_size;
  }
  // Data-parallel indices with a colour of their own (the drawn ones of a data-parallel group);
  // the same whichever group the columns are, so colours stay as the cursor moves.
  std::vector<int> owners;
};

// Ranks drawn for a data-parallel size: all up to max_columns, else the first seven and the last.
std::vector<int> representative_ranks(int dp_size, int max_columns);
bool shows(ShowMemory show, Component component);
// The colour of `owner`'s bytes in this layout (a data-parallel index; one without a colour of its
// own: other_ranks_colour).
QColor owner_colour(const RankLayout& layout, int owner);

// `selected_rank` is a global rank (0 to dp x tp - 1).
RankLayout build_rank_scene(QGraphicsScene& scene, const Planned& planned, std::int64_t step,
                            int selected_rank, const RankViewOptions& options);

// Parts of the scene (rank_transfers.cpp, rank_legend.cpp).
void add_transfers(QGraphicsScene& scene, const Planned& planned, std::int64_t step,
                   const RankLayout& layout);
// Returns the legend's bottom.
double add_legend(QGraphicsScene& scene, const Planned& planned, const RankLayout& layout,
                  const RankViewOptions& options, QPointF top_left, int selected_rank);

}  // namespace zerolens::gui
