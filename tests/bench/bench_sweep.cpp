// Sweep speed. Acceptance (issue 3): at least 1,000 configurations per second on one core; and
// ranks are symmetric, so 100,000 ranks cost about what 8 do.
#include <benchmark/benchmark.h>

#include "sim/hardware/hardware.hpp"
#include "sim/model/presets.hpp"
#include "sim/predict/sweep.hpp"

namespace zerolens {
namespace {

PlanRequest sweep_base(const std::string& model, int ranks, std::int64_t train_batch, std::int64_t seq_len) {
  PlanRequest request;
  request.model = model_from_preset(model);
  request.config.precision.precision = Precision::Bf16;
  request.config.batch.train_batch_size = train_batch;
  request.config.seq_len = seq_len;
  request.dp_size = ranks;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), ranks, 8);
  request.cluster.node.nvme_capacity_bytes = Bytes{30} << 40;  // enable the NVMe variants
  request.cluster.node.nvme_read_bandwidth = request.cluster.node.nvme_write_bandwidth = 25e9;
  return request;
}

void run_sweep_benchmark(benchmark::State& state, const PlanRequest& base) {
  std::int64_t configurations = 0, fitting = 0;
  for (auto _ : state) {
    const SweepReport report = run_sweep(base, SweepSpace{}, TimelineOptions{});
    configurations += report.evaluated;
    fitting = report.fitting;
  }
  state.SetItemsProcessed(configurations);  // items/s = configurations per second
  state.counters["fitting"] = double(fitting);
}

// LLaMA-2 7B on one DGX A100 node, 32 samples per GPU: 6 micro-batches x 14 stage/offload x 2.
void BM_SweepLlama7bOn8(benchmark::State& state) {
  run_sweep_benchmark(state, sweep_base("llama2-7b", 8, 256, 4096));
}
BENCHMARK(BM_SweepLlama7bOn8)->Unit(benchmark::kMillisecond);

// GPT-3 175B (96 layers) on 1024 GPUs, 4 samples per GPU.
void BM_SweepGpt3On1024(benchmark::State& state) {
  run_sweep_benchmark(state, sweep_base("gpt3-175b", 1024, 4096, 2048));
}
BENCHMARK(BM_SweepGpt3On1024)->Unit(benchmark::kMillisecond);

// Issue 20's search: every layout of GPT-3 175B's 1024 GPUs (TP 1-8, PP over the divisors of 96,
// virtual stages 1-2, SP, ZeRO++) x stage x offload x micro-batch x checkpointing at Megatron's
// global batch of 1536 (Narayanan et al. 2021, Table 1), on 1 and 2 threads. Goal: under 10 s.
// items/s = configurations evaluated per second; "enumerated" counts the pruned ones too.
void BM_SearchGpt3On1024(benchmark::State& state) {
  PlanRequest base = sweep_base("gpt3-175b", 1024, 1536, 2048);
  SweepSpace space;
  add_parallel_search(base, space);
  space.threads = int(state.range(0));
  std::int64_t evaluated = 0, enumerated = 0;
  for (auto _ : state) {
    const SweepReport report = run_sweep(base, space, TimelineOptions{});
    evaluated += report.evaluated;
    enumerated = report.enumerated;
  }
  state.SetItemsProcessed(evaluated);
  state.counters["enumerated"] = double(enumerated);
}
BENCHMARK(BM_SearchGpt3On1024)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();

// One stage-3 plan + timeline at 8 .. 100,000 ranks: the cost must not grow with the rank count.
void BM_StepAtRankCount(benchmark::State& state) {
  const int ranks = int(state.range(0));
  PlanRequest request = sweep_base("llama2-7b", ranks, ranks, 4096);
  request.config.zero.stage = 3;
  for (auto _ : state) {
    const Plan plan = make_plan(request);
    const Timeline timeline = simulate_timeline(plan.schedule, plan.request.cluster, TimelineOptions{});
    benchmark::DoNotOptimize(timeline.step_time);
  }
}
BENCHMARK(BM_StepAtRankCount)->Arg(8)->Arg(1024)->Arg(100000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace zerolens
