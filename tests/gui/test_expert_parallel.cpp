// Expert parallelism in the rank view (issue 21): at a MoE layer's all-to-all the selected rank's
// expert-parallel group (consecutive data-parallel ranks) is framed and only its ranks exchange;
// at the expert parameters' reduction, the ranks holding the same experts (every EP-th).
// tests/data/hf/tiny-mixtral.json (4 experts) on 8 GPUs with EP 2: EP groups {0, 1}, {2, 3}, ...;
// the ranks holding rank 5's experts are {1, 3, 5, 7}.
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

std::unique_ptr<Planned> moe_plan() {
  Settings settings = cli_default_settings();
  Diagnostics diagnostics;
  load_model_spec(settings, std::string(ZEROLENS_TEST_DATA) + "/hf/tiny-mixtral.json", diagnostics);
  settings.gpus = 8;
  apply_edits(settings, {.stage = 2, .seq_len = 16, .expert_parallel = 2});
  return plan_settings(settings);
}

std::int64_t first_op(const Plan& plan, ProcessGroup group) {
  const auto& ops = plan.schedule.ops;
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].group == group) return std::int64_t(i);
  return -1;
}

std::set<int> sending_ranks(QGraphicsScene& scene) {
  std::set<int> ranks;
  for (QGraphicsItem* item : items_with_role(scene, ItemRole::Transfer)) {
    const int rank = item->data(item_key::Rank).toInt();
    if (rank >= 0) ranks.insert(rank);
  }
  return ranks;
}

TEST(ExpertParallel, AllToAllFramesTheSelectedRanksGroup) {
  const auto planned = moe_plan();
  const std::int64_t exchange = first_op(planned->plan, ProcessGroup::Expert);
  ASSERT_GE(exchange, 0);
  for (const int selected : {0, 5}) {
    QGraphicsScene scene;
    const RankLayout layout =
        build_rank_scene(scene, *planned, exchange, selected, RankViewOptions{});
    EXPECT_EQ(layout.group, ProcessGroup::Expert);
    EXPECT_EQ(layout.subgroup_size, 2);
    EXPECT_EQ(items_with_role(scene, ItemRole::GroupFrame).size(), 1u);
    const int first = selected / 2 * 2;
    EXPECT_EQ(sending_ranks(scene), (std::set<int>{first, first + 1})) << "selected " << selected;
  }
  const std::int64_t reduction = first_op(planned->plan, ProcessGroup::ExpertData);
  ASSERT_GE(reduction, 0);
  QGraphicsScene scene;
  const RankLayout layout = build_rank_scene(scene, *planned, reduction, 5, RankViewOptions{});
  EXPECT_EQ(layout.group, ProcessGroup::ExpertData);
  EXPECT_EQ(sending_ranks(scene), (std::set<int>{1, 3, 5, 7}));
}

}  // namespace
}  // namespace zerolens::gui
