// ZeRO++ in the rank view: at hpZ's backward gather the columns of the selected rank's hpZ group
// (8 ranks of its node) are framed, the bus spans them and only they send and receive.
#include <gtest/gtest.h>

#include <QGraphicsScene>
#include <set>

#include "gui/rank_scene.hpp"
#include "gui/session.hpp"
#include "gui/settings.hpp"
#include "gui_test_helpers.hpp"

namespace zerolens::gui {
namespace {

using testing::items_with_role;

std::unique_ptr<Planned> hpz_plan() {
  Settings settings = cli_default_settings();
  settings.gpus = 16;  // two nodes of 8
  apply_edits(settings, {.stage = 3,
                         .prefetch_bucket_size = 0,
                         .param_persistence_threshold = 0,
                         .max_reuse_distance = 0,
                         .hpz_partition_size = 8,
                         .precision = Precision::Bf16});
  return plan_settings(settings);
}

std::int64_t first_secondary_gather(const Plan& plan) {
  const auto& ops = plan.schedule.ops;
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == OpKind::AllGather && ops[i].group == ProcessGroup::Secondary)
      return std::int64_t(i);
  return -1;
}

TEST(ZeroPlusPlus, HpzGatherFramesTheSelectedRanksGroup) {
  const auto planned = hpz_plan();
  const std::int64_t step = first_secondary_gather(planned->plan);
  ASSERT_GE(step, 0);
  for (const int selected : {0, 12}) {
    QGraphicsScene scene;
    const RankLayout layout = build_rank_scene(scene, *planned, step, selected, RankViewOptions{});
    EXPECT_EQ(layout.group, ProcessGroup::Secondary);
    EXPECT_EQ(layout.subgroup_size, 8);
    EXPECT_EQ(layout.subgroup_first, selected < 8 ? 0 : 8);
    EXPECT_EQ(items_with_role(scene, ItemRole::GroupFrame).size(), 1u);
    std::set<int> sending;
    for (QGraphicsItem* item : items_with_role(scene, ItemRole::Transfer)) {
      const int rank = item->data(item_key::Rank).toInt();
      if (rank >= 0) sending.insert(rank);
    }
    std::set<int> group;
    for (int r = layout.subgroup_first; r < layout.subgroup_first + 8; ++r) group.insert(r);
    EXPECT_EQ(sending, group) << "selected " << selected;
  }
  // Elsewhere (a forward gather over all 16) nothing is framed.
  QGraphicsScene scene;
  const RankLayout whole = build_rank_scene(scene, *planned, 0, 0, RankViewOptions{});
  EXPECT_EQ(whole.subgroup_size, 0);
  EXPECT_TRUE(items_with_role(scene, ItemRole::GroupFrame).empty());
}

}  // namespace
}  // namespace zerolens::gui
