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

}  // namespace
}  // namespace zerolens
