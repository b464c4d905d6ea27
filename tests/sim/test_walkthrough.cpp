// The walkthrough's plan request shared by `zerolens trace --walkthrough` and the GUI, the memory
// state per op that the GUI's rank view draws, and op descriptions naming a rank.
#include <map>

#include <gtest/gtest.h>

#include "sim/plan/walkthrough.hpp"
#include "sim/schedule/memory_replay.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

// Four GPUs, ZeRO-3, every tensor partitioned: each layer's parameters are gathered before its
// forward and again before its backward, and released after each use, as in the seed document.
TEST(Walkthrough, EveryLayerIsGatheredAndReleasedInForwardAndBackward) {
  const Plan plan = make_plan(walkthrough_request());
  const ScheduleContext& c = plan.schedule.context;
  EXPECT_EQ(plan.request.model.name, "gpt2-tiny");
  EXPECT_EQ(c.dp_size, 4);
  EXPECT_EQ(c.stage, 3);
  EXPECT_EQ(c.precision, Precision::Fp16);
  EXPECT_EQ(c.micro_batch, 1);
  EXPECT_EQ(c.seq_len, 128);
  EXPECT_EQ(plan.schedule.layout.persistent, 0);
  std::map<std::int32_t, int> gathers, releases;
  for (const Op& op : plan.schedule.ops) {
    if (op.kind == OpKind::AllGather) ++gathers[op.layer];
    if (op.kind == OpKind::Release) ++releases[op.layer];
  }
  const auto& layers = plan.request.model.layers;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    if (layers[l].params.empty()) continue;
    // The tied embedding is used twice in forward (embedding and LM head) and twice in backward.
    const int uses = layers[l].kind == LayerKind::Embedding ? 4 : 2;
    EXPECT_EQ(gathers[std::int32_t(l)], uses) << layers[l].name;
    EXPECT_EQ(releases[std::int32_t(l)], uses) << layers[l].name;
  }
}

TEST(ReplayMemoryComponents, StatesAddUpToTheReplayedTotals) {
  for (int stage = 0; stage <= 3; ++stage) {
    TrainingConfig config = testing::mixed_adam(stage);
    if (stage >= 1) config.zero.offload_optimizer.device = OffloadDevice::Cpu;
    const Plan plan = testing::plan_of(testing::small_transformer(3, 64), config, 4, 8);
    const MemoryTimeline replay = replay_memory(plan.schedule, true);
    const auto states = replay_memory_components(plan.schedule);
    ASSERT_EQ(states.size(), plan.schedule.ops.size() + 1);
    std::array<Bytes, kDeviceCount> resident{};
    for (const auto& effect : plan.schedule.resident)
      resident[std::size_t(effect.device)] += effect.bytes;
    for (std::size_t i = 0; i < states.size(); ++i) {
      for (int d = 0; d < kDeviceCount; ++d) {
        Bytes total = 0;
        for (Bytes b : states[i][std::size_t(d)]) total += b;
        EXPECT_EQ(total, i == 0 ? resident[std::size_t(d)] : replay.after_op[i - 1][std::size_t(d)])
            << "stage " << stage << " state " << i << " device " << d;
      }
    }
  }
}

TEST(Describe, NamesTheRank) {
  const Plan plan = make_plan(walkthrough_request());
  EXPECT_EQ(plan.schedule.describe(0, plan.request.model).rfind("rank 0 all-gathers", 0), 0u);
  EXPECT_EQ(plan.schedule.describe(0, plan.request.model, 3).rfind("rank 3 all-gathers", 0), 0u);
}

}  // namespace
}  // namespace zerolens
