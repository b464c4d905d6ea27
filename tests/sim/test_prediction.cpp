// predict() gives the figures the separate calls gave (make_plan, simulate_timeline, make_trace,
// replay_memory_components) from one replay; the sweep simulates only what fits; step_rates is
// the timeline's; a trace's run is planned again from what it records.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sim/hardware/hardware.hpp"
#include "sim/predict/prediction.hpp"
#include "sim/schedule/memory_replay.hpp"
#include "sim/trace/trace_replan.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

PlanRequest offload_request() {
  TrainingConfig config = testing::mixed_adam(3);
  config.zero.offload_optimizer.device = OffloadDevice::Cpu;
  config.zero.stage3_param_persistence_threshold = 1000;
  config.batch.gradient_accumulation_steps = 2;
  config.activation_checkpointing.enabled = true;
  PlanRequest request = testing::plan_of(testing::small_transformer(3, 64), config, 4, 2).request;
  request.cluster =
      with_ranks(cluster_from_preset("dgx-a100-80gb"), 4, 2);  // every rate, and a file can hold it
  return request;
}

TEST(Prediction, GivesTheFiguresOfTheSeparateCalls) {
  const PlanRequest request = offload_request();
  const Prediction p = predict(request, {.trace_ranks = 2, .memory_states = true});
  const Plan plan = make_plan(request);
  const Timeline timeline =
      simulate_timeline(plan.schedule, plan.request.cluster, TimelineOptions{});
  const Trace trace = make_trace(plan, timeline, 2);
  ASSERT_TRUE(p.simulated);
  for (int d = 0; d < kDeviceCount; ++d) {
    EXPECT_EQ(p.plan.devices[std::size_t(d)].peak, plan.devices[std::size_t(d)].peak);
    EXPECT_EQ(p.plan.devices[std::size_t(d)].categories, plan.devices[std::size_t(d)].categories);
  }
  EXPECT_EQ(p.plan.comm.links.intra_node, plan.comm.links.intra_node);
  EXPECT_EQ(p.timeline.step_time, timeline.step_time);
  EXPECT_EQ(p.timeline.tokens_per_second, timeline.tokens_per_second);
  EXPECT_EQ(p.timeline.memory.size(), timeline.memory.size());
  EXPECT_EQ(trace_to_json(p.trace), trace_to_json(trace));
  EXPECT_EQ(p.memory.states, replay_memory_components(plan.schedule));
  EXPECT_EQ(category_highs(p.memory), category_highs(plan.schedule));
  EXPECT_EQ(p.memory.after_op, replay_memory(plan.schedule, true).after_op);
}

TEST(Prediction, KeepsOnlyWhatIsAskedFor) {
  const PlanRequest request = offload_request();
  const Prediction plan_only = predict(request, {.simulate = Simulate::Never});
  EXPECT_FALSE(plan_only.simulated);
  EXPECT_TRUE(plan_only.memory.after_op.empty());
  EXPECT_TRUE(plan_only.trace.ops.empty());
  const Prediction timeline_only = predict(request);
  EXPECT_TRUE(timeline_only.simulated);
  EXPECT_TRUE(timeline_only.memory.states.empty());
  EXPECT_TRUE(timeline_only.trace.ops.empty());
  // A plan that does not fit is not simulated when only fitting ones are (the sweep's rule).
  PlanRequest tiny = request;
  tiny.cluster.gpu.memory_bytes = 1;
  EXPECT_FALSE(predict(tiny, {.simulate = Simulate::IfFits}).simulated);
  EXPECT_TRUE(predict(request, {.simulate = Simulate::IfFits}).simulated);
  EXPECT_THROW(predict(request, {.trace_ranks = 5}), InputError);  // more ranks than dp
}

TEST(Prediction, OfAPlanMadeAlready) {
  Plan plan = make_plan(offload_request());
  plan.notes.push_back("the executor's note");
  const Timeline timeline =
      simulate_timeline(plan.schedule, plan.request.cluster, TimelineOptions{});
  const Prediction p = predict(plan, {.trace_ranks = 1});
  EXPECT_EQ(p.plan.notes.back(), "the executor's note");
  EXPECT_EQ(p.timeline.step_time, timeline.step_time);
  EXPECT_EQ(p.trace.ops.size(), plan.schedule.ops.size());
}

TEST(StepRates, AreTheTimelines) {
  const Plan plan = make_plan(offload_request());
  const Timeline timeline =
      simulate_timeline(plan.schedule, plan.request.cluster, TimelineOptions{});
  const StepRates rates = step_rates(plan.schedule, timeline.step_time);
  EXPECT_EQ(rates.tokens_per_second, timeline.tokens_per_second);
  EXPECT_EQ(rates.model_flops_per_gpu, timeline.model_flops_per_gpu);
  EXPECT_EQ(rates.hardware_flops_per_gpu, timeline.hardware_flops_per_gpu);
  EXPECT_GT(rates.hardware_flops_per_gpu, rates.model_flops_per_gpu);  // recompute
  // Model FLOPs are 3 x forward, as the executor counted them before it asked the schedule.
  const ScheduleContext& c = plan.schedule.context;
  const double forward =
      plan.request.model.forward_flops_per_step(c.micro_batch * c.grad_accumulation, c.seq_len);
  EXPECT_NEAR(rates.model_flops_per_gpu * timeline.step_time, 3 * forward, 1e-9 * forward);
  EXPECT_EQ(step_rates(plan.schedule, 0).tokens_per_second, 0);
}

TEST(TraceReplan, PlansTheRecordedInputsOrTheSummary) {
  const PlanRequest request = offload_request();
  const Prediction p = predict(request, {.trace_ranks = 1});
  const Trace trace = trace_from_json(trace_to_json(p.trace));
  const PlanRequest again = replan_request(trace.run);
  EXPECT_EQ(make_plan(again).schedule.ops.size(), p.plan.schedule.ops.size());
  TraceRun bare = trace.run;
  bare.inputs.reset();
  EXPECT_FALSE(recorded_request(bare));
  EXPECT_THROW(replan_request(bare), InputError);
  const TrainingConfig config = config_for_run(bare, TrainingConfig{});
  EXPECT_EQ(config.zero.stage, 3);
  EXPECT_EQ(config.zero.offload_optimizer.device, OffloadDevice::Cpu);
  EXPECT_EQ(config.precision.precision, Precision::Fp16);
  EXPECT_EQ(config.batch.gradient_accumulation_steps, 2);
  EXPECT_EQ(config.seq_len, bare.seq_len);
  bare.precision = "fp8";
  EXPECT_THROW(config_for_run(bare, TrainingConfig{}), InputError);
}

}  // namespace
}  // namespace zerolens
