// The rank view's scene measured against the schedule: block heights are the bytes of each
// component at the cursor times one scale per device, totals agree with replay_memory, partitions
// are owned by their rank and sized per tensor as ZeRO-3 pads them, and what an op gathers and
// releases is drawn.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "gui/main_window.hpp"
#include "gui/moments.hpp"
#include "gui/ownership.hpp"
#include "gui/rank_scene.hpp"
#include "gui_test_helpers.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens::gui {
namespace {

using testing::data_bytes;
using testing::data_int;
using testing::height_of;
using testing::items_with_role;
using testing::variant_settings;

// Heights of the blocks drawn for (rank, device, component).
std::map<std::tuple<int, int, int>, double> block_heights(const QGraphicsScene& scene) {
  std::map<std::tuple<int, int, int>, double> heights;
  for (QGraphicsItem* item : items_with_role(scene, ItemRole::Block)) {
    heights[{data_int(item, item_key::Rank), data_int(item, item_key::Device),
             data_int(item, item_key::Component)}] += height_of(item);
  }
  return heights;
}

Bytes device_total(const DeviceComponentBytes& state, Device device) {
  Bytes total = 0;
  for (Bytes b : state[std::size_t(device)]) total += b;
  return total;
}

// Sum over the model's tensors of ceil(numel / dp) elements: the ZeRO-3 partition of one rank.
Elements padded_partition(const Model& model, int dp) {
  Elements total = 0;
  for (const auto& layer : model.layers) {
    for (const auto& tensor : layer.params) total += (tensor.numel() + dp - 1) / dp;
  }
  return total;
}

TEST(RankScene, BlockHeightsAreTheScheduleBytesForEveryVariantAndStep) {
  for (const Variant& variant : standard_variants()) {
    const auto planned = plan_settings(variant_settings(variant));
    const Schedule& schedule = planned->plan.schedule;
    const MemoryTimeline replay = replay_memory(schedule, true);
    const auto last = std::int64_t(schedule.ops.size()) - 1;
    for (std::int64_t step : {std::int64_t(-1), std::int64_t(0), last / 3,
                              planned->plan.device(Device::Gpu).peak_op, last}) {
      QGraphicsScene scene;
      const RankLayout layout = build_rank_scene(scene, *planned, step, 0, RankViewOptions{});
      const auto heights = block_heights(scene);
      for (const auto& column : layout.columns) {
        for (int d = 0; d < kDeviceCount; ++d) {
          if (!layout.devices[std::size_t(d)]) continue;
          const double scale = layout.pixels_per_byte[std::size_t(d)];
          double total_height = 0;
          for (int c = 0; c < kComponentCount; ++c) {
            const auto found = heights.find({column.rank, d, c});
            const double drawn = found == heights.end() ? 0 : found->second;
            total_height += drawn;
            EXPECT_NEAR(drawn,
                        double(planned->state_at(step)[std::size_t(d)][std::size_t(c)]) * scale,
                        1e-6)
                << variant.label << " step " << step << " rank " << column.rank << " "
                << to_string(Component(c));
          }
          // The same total from replay_memory, the sim's own replay of the schedule.
          const Bytes total = step < 0 ? device_total(planned->states.front(), Device(d))
                                       : replay.after_op[std::size_t(step)][std::size_t(d)];
          EXPECT_NEAR(total_height, double(total) * scale, 1e-6)
              << variant.label << " step " << step;
        }
      }
    }
  }
}

TEST(RankScene, CapacityScaleDrawsTheCapacityLineAtItsBytes) {
  const auto planned =
      plan_settings(variant_settings(standard_variants()[4]));  // ZeRO-1 + optimizer on CPU
  QGraphicsScene scene;
  const RankLayout layout = build_rank_scene(scene, *planned, 5, 0, RankViewOptions{});
  ASSERT_TRUE(layout.devices[std::size_t(Device::Cpu)]);
  const Cluster& cluster = planned->plan.request.cluster;
  // Four ranks share the node's host memory: each column gets a quarter.
  EXPECT_EQ(layout.capacity[std::size_t(Device::Gpu)], cluster.gpu.memory_bytes);
  EXPECT_EQ(layout.capacity[std::size_t(Device::Cpu)], cluster.node.cpu_memory_bytes / 4);
  int lines = 0;
  for (QGraphicsItem* item : items_with_role(scene, ItemRole::Capacity)) {
    const auto d = std::size_t(data_int(item, item_key::Device));
    const auto& column = layout.columns[std::size_t(data_int(item, item_key::Rank))];
    const double y = static_cast<QGraphicsLineItem*>(item)->line().y1();
    EXPECT_NEAR(column.bars[d].bottom() - y, double(layout.capacity[d]) * layout.pixels_per_byte[d],
                1e-6);
    ++lines;
  }
  EXPECT_EQ(lines, 4 * 2);  // GPU and CPU of four ranks
}

TEST(RankScene, Zero3PartitionsAreOwnedByTheirRankAndPaddedPerTensor) {
  const auto planned = plan_settings(walkthrough_settings());
  QGraphicsScene scene;
  const RankLayout layout = build_rank_scene(scene, *planned, -1, 0, RankViewOptions{});
  const Elements partition = padded_partition(planned->plan.request.model, 4);
  // fp16 parameters and gradients, fp32 master copy, Adam's two fp32 moments.
  const std::map<Component, Bytes> expected = {{Component::ParamsPartition, 2 * partition},
                                               {Component::GradsPartition, 2 * partition},
                                               {Component::MasterPartition, 4 * partition},
                                               {Component::OptimizerStatePartition, 8 * partition}};
  std::map<std::pair<int, int>, int> seen;
  for (QGraphicsItem* item : items_with_role(scene, ItemRole::Block)) {
    const auto component = Component(data_int(item, item_key::Component));
    if (!expected.count(component)) continue;
    const int rank = data_int(item, item_key::Rank);
    EXPECT_EQ(data_int(item, item_key::Owner), rank);
    EXPECT_EQ(data_bytes(item), expected.at(component)) << to_string(component);
    EXPECT_NEAR(height_of(item), double(expected.at(component)) * layout.pixels_per_byte[0], 1e-6);
    ++seen[{rank, int(component)}];
  }
  EXPECT_EQ(seen.size(), 4u * expected.size());
}

TEST(RankScene, DataParallelReplicasHoldEveryRanksShare) {
  const auto planned = plan_settings(variant_settings(standard_variants()[0]));  // DP
  QGraphicsScene scene;
  build_rank_scene(scene, *planned, -1, 0, RankViewOptions{});
  const Bytes full = 2 * planned->plan.request.model.parameter_count();
  std::map<int, std::set<int>> owners;
  for (QGraphicsItem* item : items_with_role(scene, ItemRole::Block)) {
    if (Component(data_int(item, item_key::Component)) != Component::ParamsFull) continue;
    EXPECT_EQ(data_bytes(item), full / 4);
    owners[data_int(item, item_key::Rank)].insert(data_int(item, item_key::Owner));
  }
  ASSERT_EQ(owners.size(), 4u);
  for (const auto& [rank, set] : owners) EXPECT_EQ(set, (std::set<int>{0, 1, 2, 3})) << rank;
}

TEST(RankScene, GatherDrawsEveryOwnersShareAndReleaseDrawsItFreed) {
  const auto planned = plan_settings(walkthrough_settings());
  const Plan& plan = planned->plan;
  const std::int64_t gather = next_moment(plan, -1, Moment::Gather);
  const std::int64_t release = next_moment(plan, gather, Moment::Release);
  ASSERT_GE(gather, 0);
  ASSERT_GT(release, gather);
  const Bytes message = plan.schedule.ops[std::size_t(gather)].bytes;
  QGraphicsScene scene;
  const RankLayout layout = build_rank_scene(scene, *planned, gather, 0, RankViewOptions{});
  std::map<int, std::set<int>> owners;
  for (QGraphicsItem* item : items_with_role(scene, ItemRole::Block)) {
    if (Component(data_int(item, item_key::Component)) != Component::GatheredParams) continue;
    EXPECT_EQ(data_bytes(item), message / 4);
    owners[data_int(item, item_key::Rank)].insert(data_int(item, item_key::Owner));
  }
  EXPECT_EQ(owners.size(), 4u);
  for (const auto& [rank, set] : owners) EXPECT_EQ(set.size(), 4u) << rank;
  // Two arrows (line and head each) per rank plus the bus.
  EXPECT_EQ(items_with_role(scene, ItemRole::Transfer).size(), 4u * layout.columns.size() + 1);

  build_rank_scene(scene, *planned, release, 0, RankViewOptions{});
  int freed = 0;
  for (QGraphicsItem* item : items_with_role(scene, ItemRole::Freed)) {
    EXPECT_EQ(Component(data_int(item, item_key::Component)), Component::GatheredParams);
    EXPECT_EQ(data_bytes(item), message);
    ++freed;
  }
  EXPECT_EQ(freed, 4);
}

// The key idea of ZeRO-2/3 in the walkthrough's own Show mode: every rank holds the full,
// unreduced gradients of the layers it has run backward through (each owner's share in its
// colour), and a reduce-scatter frees them (drawn dashed) once each owner has its summed slice.
// The bytes are the schedule's (tests/sim/test_walkthrough.cpp works them out by hand).
TEST(RankScene, WalkthroughShowsGradientsUntilTheirReduceScatterFreesThem) {
  MainWindow window(walkthrough_settings(), false);
  const Planned& planned = *window.session().planned();
  const RankViewOptions options = window.ranks().view().options();
  ASSERT_EQ(options.show, ShowMemory::StatesAndCopies);
  const std::int64_t reduce = next_moment(planned.plan, -1, Moment::Reduce);
  ASSERT_GT(reduce, 0);
  const Op& op = planned.plan.schedule.ops[std::size_t(reduce)];
  ASSERT_EQ(op.kind, OpKind::ReduceScatter);
  const auto unreduced = [&](std::int64_t step) {
    return planned.state_at(step)[std::size_t(Device::Gpu)][std::size_t(Component::UnreducedGrads)];
  };
  ASSERT_GT(unreduced(reduce - 1), unreduced(reduce));
  QGraphicsScene scene;
  build_rank_scene(scene, planned, reduce - 1, 0, options);
  std::map<int, std::set<int>> owners;
  std::map<int, Bytes> drawn;
  for (QGraphicsItem* item : items_with_role(scene, ItemRole::Block)) {
    if (Component(data_int(item, item_key::Component)) != Component::UnreducedGrads) continue;
    owners[data_int(item, item_key::Rank)].insert(data_int(item, item_key::Owner));
    drawn[data_int(item, item_key::Rank)] += data_bytes(item);
  }
  ASSERT_EQ(owners.size(), 4u);
  for (const auto& [rank, set] : owners) {
    EXPECT_EQ(set, (std::set<int>{0, 1, 2, 3})) << rank;
    EXPECT_EQ(drawn[rank], unreduced(reduce - 1)) << rank;
  }
  build_rank_scene(scene, planned, reduce, 0, options);
  std::map<int, Bytes> freed;
  for (QGraphicsItem* item : items_with_role(scene, ItemRole::Freed))
    if (Component(data_int(item, item_key::Component)) == Component::UnreducedGrads)
      freed[data_int(item, item_key::Rank)] += data_bytes(item);
  ASSERT_EQ(freed.size(), 4u);
  for (const auto& [rank, bytes] : freed) EXPECT_EQ(bytes, op.bytes) << rank;
}

TEST(RankScene, MoreThanSixteenRanksDrawRepresentativeOnes) {
  Settings settings = walkthrough_settings();
  settings.gpus = 64;
  const auto planned = plan_settings(settings);
  EXPECT_EQ(representative_ranks(16, 16).size(), 16u);
  // The first op after which a rank holds unreduced gradients (a full copy of a layer's).
  std::int64_t step = 0;
  while (planned->state_at(step)[0][std::size_t(Component::UnreducedGrads)] == 0) ++step;
  QGraphicsScene scene;
  const RankLayout layout = build_rank_scene(scene, *planned, step, 63, RankViewOptions{});
  std::vector<int> ranks;
  for (const auto& column : layout.columns) ranks.push_back(column.rank);
  EXPECT_EQ(ranks, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 63}));
  bool note = false;
  for (QGraphicsItem* item : scene.items()) {
    if (auto* text = dynamic_cast<QGraphicsTextItem*>(item))
      note = note || text->toPlainText().contains("64 ranks: 8 drawn");
  }
  EXPECT_TRUE(note);
  // A replicated block is the rank's own 1/64 share and one slice for the 63 others.
  const Bytes unreduced = planned->state_at(step)[0][std::size_t(Component::UnreducedGrads)];
  std::map<int, Bytes> by_owner;
  for (QGraphicsItem* item : items_with_role(scene, ItemRole::Block)) {
    if (Component(data_int(item, item_key::Component)) != Component::UnreducedGrads ||
        data_int(item, item_key::Rank) != 63)
      continue;
    by_owner[data_int(item, item_key::Owner)] += data_bytes(item);
  }
  EXPECT_EQ(by_owner.size(), 2u);
  EXPECT_EQ(by_owner[63], unreduced / 64);
  EXPECT_EQ(by_owner[kOtherRanks], unreduced - unreduced / 64);
}

TEST(RankScene, OffloadCopiesAreDrawnBetweenTheRanksDevices) {
  const Variant nvme = standard_variants().back();  // ZeRO-3 + optimizer and parameters on NVMe
  const auto planned = plan_settings(variant_settings(nvme));
  const auto& ops = planned->plan.schedule.ops;
  std::int64_t copy = -1;
  for (std::size_t i = 0; i < ops.size() && copy < 0; ++i) {
    if (ops[i].kind == OpKind::CopyH2D) copy = std::int64_t(i);
  }
  ASSERT_GE(copy, 0);
  QGraphicsScene scene;
  const RankLayout layout = build_rank_scene(scene, *planned, copy, 0, RankViewOptions{});
  EXPECT_TRUE(layout.devices[std::size_t(Device::Cpu)]);
  EXPECT_TRUE(layout.devices[std::size_t(Device::Nvme)]);
  EXPECT_EQ(items_with_role(scene, ItemRole::Transfer).size(),
            2u * layout.columns.size());  // an arc and a head each
}

TEST(RankScene, ModelStatesViewLeavesOutActivationsAndOverhead) {
  const auto planned = plan_settings(walkthrough_settings());
  RankViewOptions options;
  options.show = ShowMemory::ModelStates;
  options.scale = ScaleMode::Peak;
  QGraphicsScene scene;
  const RankLayout layout = build_rank_scene(scene, *planned, 10, 0, options);
  double height = 0;
  for (QGraphicsItem* item : items_with_role(scene, ItemRole::Block)) {
    if (data_int(item, item_key::Rank) != 0) continue;
    const Category category = category_of(Component(data_int(item, item_key::Component)));
    EXPECT_TRUE(category != Category::Activations && category != Category::Overhead &&
                category != Category::Buffers);
    height += height_of(item);
  }
  const auto& gpu = planned->state_at(10)[0];
  const Bytes states = gpu[std::size_t(Component::ParamsPartition)] +
                       gpu[std::size_t(Component::GradsPartition)] +
                       gpu[std::size_t(Component::MasterPartition)] +
                       gpu[std::size_t(Component::OptimizerStatePartition)];
  EXPECT_NEAR(height, double(states) * layout.pixels_per_byte[0], 1e-6);
  // Zoomed to the peak of what is shown: the model states fill the bar (they do not change in
  // forward) up to the strip kept for the capacity's note.
  EXPECT_NEAR(height, layout.bar_height - kCapacityNoteStrip, 1e-6);
}

}  // namespace
}  // namespace zerolens::gui
