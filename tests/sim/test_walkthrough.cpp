// The walkthrough's plan request shared by `zerolens trace --walkthrough` and the GUI, the memory
// state per op that the GUI's rank view draws, and op descriptions naming a rank.
#include <map>
#include <string>
#include <vector>

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

// The walkthrough's reduce bucket (50,000 elements, WalkthroughSetup) and gradients left where
// autograd put them (contiguous_gradients off): the full gradients of every rank appear at their
// backward and the reduce-scatter of their bucket frees them. By hand, gpt2-tiny's tensors: the
// embedding 256 x 64 + 128 x 64 = 24,576; a block ln_1 128, c_attn 64 x 192 + 192 = 12,480,
// attention c_proj 4,160, ln_2 128, c_fc 64 x 256 + 256 = 16,640, MLP c_proj 16,448 = 49,984; ln_f
// 128. Backward adds each layer's tensors last to first and reduces the bucket when the next one
// would overflow it: ln_f 128 + h.1 without ln_1 (49,856) = 49,984, ln_1's bias would make 50,048
// -> bucket 0 of 49,984 elements (99,968 bytes in fp16) in h.1's backward; h.1's ln_1 128 + h.0
// without ln_1 = 49,984 -> bucket 1 (99,968 bytes) in h.0's; h.0's ln_1 128 + the embedding 24,576
// (its gradients, made by the tied LM head's backward, complete at the embedding's) = 24,704 ->
// bucket 2 (49,408 bytes) at the end of backward. 99,968 + 99,968 + 49,408 = 249,344 = 2 x
// 124,672, every gradient once. (Each tensor divides by 4: no padding in the messages.)
TEST(Walkthrough, ReduceScatterFollowsEachLayersBackwardAndFreesItsGradients) {
  const Plan plan = make_plan(walkthrough_request());
  const auto states = replay_memory_components(plan.schedule);
  const auto unreduced = [&](std::size_t state) {
    return states[state][std::size_t(Device::Gpu)][std::size_t(Component::UnreducedGrads)];
  };
  const auto& ops = plan.schedule.ops;
  const auto& layers = plan.request.model.layers;
  std::vector<Bytes> messages, freed;
  std::vector<std::string> after_backward_of;
  std::string last_backward;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(states[i + 1][std::size_t(Device::Gpu)][std::size_t(Component::ReduceBucket)], 0)
        << "no bucket buffer without contiguous_gradients, op " << i + 1;
    if (ops[i].kind == OpKind::Backward) last_backward = layers[std::size_t(ops[i].layer)].name;
    if (ops[i].kind != OpKind::ReduceScatter) continue;
    messages.push_back(ops[i].bytes);
    freed.push_back(unreduced(i) - unreduced(i + 1));  // state i: before op i
    after_backward_of.push_back(last_backward);
  }
  EXPECT_EQ(messages, (std::vector<Bytes>{99'968, 99'968, 49'408}));
  EXPECT_EQ(freed, messages);
  EXPECT_EQ(after_backward_of, (std::vector<std::string>{"h.1", "h.0", "embedding"}));
  EXPECT_EQ(unreduced(states.size() - 1), 0);
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
