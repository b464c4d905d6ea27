// Exposed time as intervals: worked by hand, and a trace's intervals (the GUI's exposed lane) add
// up to the timeline's exposed figures of the same step (two code paths: the schedule's streams,
// the trace's stream names).
#include <gtest/gtest.h>

#include "sim/hardware/hardware.hpp"
#include "sim/predict/prediction.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

TEST(ExposedIntervals, WorkedByHand) {
  // Compute [0, 1) and [2, 3); a collective [0.5, 2.5) shows in [1, 2); an offload copy [2.5, 4)
  // and a CPU step [3.5, 5) show in [3, 5); a second collective inside compute shows nowhere.
  const ExposedIntervals exposed = exposed_intervals({{StreamClass::Compute, 0, 1},
                                                      {StreamClass::Communication, 0.5, 2.5},
                                                      {StreamClass::Compute, 2, 3},
                                                      {StreamClass::Offload, 2.5, 4},
                                                      {StreamClass::Offload, 3.5, 5},
                                                      {StreamClass::Communication, 2.1, 2.9}});
  EXPECT_EQ(exposed.communication, (Intervals{{1, 2}}));
  EXPECT_EQ(exposed.offload, (Intervals{{3, 5}}));
  EXPECT_DOUBLE_EQ(total_length(exposed.offload), 2);
}

TEST(ExposedIntervals, OfATraceAddUpToTheTimelinesFigures) {
  TrainingConfig config = testing::mixed_adam(3);
  config.zero.offload_optimizer.device = OffloadDevice::Cpu;
  config.zero.offload_param.device = OffloadDevice::Cpu;
  config.batch.gradient_accumulation_steps = 2;
  PlanRequest request = testing::plan_of(testing::small_transformer(3, 256), config, 4, 2).request;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), 4, 2);
  const Prediction prediction = predict(request, {.trace_ranks = 2});
  ASSERT_GT(prediction.timeline.exposed_communication, 0);
  ASSERT_GT(prediction.timeline.exposed_offload, 0);
  for (const int rank : {0, 1}) {
    const ExposedIntervals exposed = trace_exposed_intervals(prediction.trace, rank);
    EXPECT_NEAR(total_length(exposed.communication), prediction.timeline.exposed_communication,
                1e-12 * prediction.timeline.step_time);
    EXPECT_NEAR(total_length(exposed.offload), prediction.timeline.exposed_offload,
                1e-12 * prediction.timeline.step_time);
    for (std::size_t i = 1; i < exposed.communication.size(); ++i)
      EXPECT_LT(exposed.communication[i - 1].second, exposed.communication[i].first)
          << "sorted and disjoint";
  }
}

// The memory clock: each state once its op and every op before it (program order) have ended.
TEST(MemoryTimes, WorkedByHandAndTheTimelinesSamples) {
  const std::vector<OpTiming> ops{{0, 3}, {0, 1}, {1, 1}, {3, 2}, {2, 2}};  // ends 3, 1, 2, 5, 4
  EXPECT_EQ(memory_times(ops), (std::vector<double>{3, 3, 3, 5, 5}));
  // A ZeRO-3 step whose forward gathers run far ahead of the compute: its samples follow program
  // order, so the memory at a moment is never a later op's state.
  TrainingConfig config = testing::mixed_adam(3);
  config.seq_len = 512;
  config.batch.micro_batch_per_gpu = 4;
  PlanRequest request = testing::plan_of(testing::small_transformer(8, 512), config, 16, 8).request;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), 16, 8);
  const Prediction prediction = predict(request);
  const auto& samples = prediction.timeline.memory;
  ASSERT_EQ(samples.size(), prediction.plan.schedule.ops.size() + 1);
  Bytes highest = 0;
  for (std::size_t i = 1; i < samples.size(); ++i) {
    EXPECT_GE(samples[i].time, samples[i - 1].time);
    EXPECT_EQ(samples[i].bytes, prediction.memory.after_op[i - 1])
        << "sample " << i << " is op " << i - 1 << "'s";
    highest = std::max(highest, samples[i].bytes[0]);
  }
  Bytes replay_highest = 0;
  for (const auto& after : prediction.memory.after_op)
    replay_highest = std::max(replay_highest, after[0]);
  EXPECT_EQ(highest, replay_highest);
}

}  // namespace
}  // namespace zerolens
