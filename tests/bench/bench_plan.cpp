// Planning speed. Acceptance: one full plan of a 1-trillion-parameter model on 4096 GPUs takes well
// under 1 ms.
#include <benchmark/benchmark.h>

#include "sim/hardware/hardware.hpp"
#include "sim/model/presets.hpp"
#include "sim/plan/plan.hpp"
#include "sim/timeline/timeline.hpp"

namespace zerolens {
namespace {

PlanRequest trillion_on_4096(int stage, OffloadDevice optimizer) {
  PlanRequest request;
  request.model = model_from_dense(1e12);
  request.config.zero.stage = stage;
  request.config.zero.offload_optimizer.device = optimizer;
  request.config.precision.precision = Precision::Bf16;
  request.config.batch.micro_batch_per_gpu = 1;
  request.config.activation_checkpointing.enabled = true;
  request.dp_size = 4096;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), 4096, 8);
  return request;
}

void BM_PlanTrillionParams4096Gpus(benchmark::State& state) {
  const PlanRequest request = trillion_on_4096(int(state.range(0)), OffloadDevice::None);
  for (auto _ : state) {
    Plan plan = make_plan(request);  // includes copying the request (model, config, cluster) into the plan
    benchmark::DoNotOptimize(plan.devices[0].peak);
  }
  state.SetLabel("stage " + std::to_string(state.range(0)) + ", " +
                 std::to_string(request.model.layers.size()) + " layers");
}
BENCHMARK(BM_PlanTrillionParams4096Gpus)->Arg(0)->Arg(1)->Arg(2)->Arg(3)->Unit(benchmark::kMicrosecond);

void BM_PlanTrillionParamsOffload(benchmark::State& state) {
  const PlanRequest request = trillion_on_4096(3, OffloadDevice::Cpu);
  for (auto _ : state) {
    Plan plan = make_plan(request);
    benchmark::DoNotOptimize(plan.devices[0].peak);
  }
}
BENCHMARK(BM_PlanTrillionParamsOffload)->Unit(benchmark::kMicrosecond);

// The same plan without the request copy: the schedule, its replay and the traffic summary.
void BM_PlanTrillionParamsMovedRequest(benchmark::State& state) {
  const PlanRequest request = trillion_on_4096(3, OffloadDevice::None);
  for (auto _ : state) {
    state.PauseTiming();
    PlanRequest copy = request;
    state.ResumeTiming();
    Plan plan = make_plan(std::move(copy));
    benchmark::DoNotOptimize(plan.devices[0].peak);
  }
}
BENCHMARK(BM_PlanTrillionParamsMovedRequest)->Unit(benchmark::kMicrosecond);

// Issue 3: schedule + timeline of GPT-3 175B (96 layers) on 1024 GPUs at stage 3 in under 50 ms.
void BM_ScheduleAndTimelineGpt3Stage3On1024(benchmark::State& state) {
  PlanRequest request;
  request.model = model_from_preset("gpt3-175b");
  request.config.zero.stage = 3;
  request.config.precision.precision = Precision::Fp16;
  request.config.batch.micro_batch_per_gpu = 1;
  request.config.activation_checkpointing.enabled = true;
  request.dp_size = 1024;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), 1024, 8);
  for (auto _ : state) {
    Plan plan = make_plan(request);
    Timeline timeline = simulate_timeline(plan.schedule, plan.request.cluster, TimelineOptions{});
    benchmark::DoNotOptimize(timeline.step_time);
  }
}
BENCHMARK(BM_ScheduleAndTimelineGpt3Stage3On1024)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace zerolens
