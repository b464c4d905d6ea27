// ZeRO-Offload's one-step delayed parameter update (seed 004's "DPU"; Ren et al. 2021, section
// 5.2): its config, its place in the schedule and its step time, worked by hand on a timeline.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sim/config/overrides.hpp"
#include "sim/timeline/timeline.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

using nlohmann::json;

// Two layers of 1e6 parameters whose forward is 1e9 FLOPs each (micro-batch 1, sequence 1).
Model two_layers() {
  Model model;
  model.name = "two-layers";
  model.source = "test";
  for (int i = 0; i < 2; ++i) {
    Layer layer;
    layer.name = "layer" + std::to_string(i);
    layer.params.push_back({"layer" + std::to_string(i) + ".w", {1'000'000}});
    layer.matmul_flops_per_token = 1e9;
    model.layers.push_back(layer);
  }
  return model;
}

// One GPU of 1e12 bf16 FLOP/s (a forward 1 ms, a backward 2 ms), HBM too fast to matter, PCIe 4e9
// bytes/s each way without latency, host memory of `cpu_bandwidth` bytes/s.
Cluster timing_cluster(double cpu_bandwidth) {
  Cluster cluster = testing::test_cluster(1);
  cluster.nodes = 1;
  cluster.gpu.peak_flops_fp16 = cluster.gpu.peak_flops_bf16 = cluster.gpu.peak_flops_fp32 = 1e12;
  cluster.gpu.hbm_bandwidth = 1e18;
  cluster.node.pcie = {"PCIe", 4e9, 0};
  cluster.node.cpu_memory_bandwidth = cpu_bandwidth;
  cluster.node.cpu_cores = 1;
  cluster.node.nvme_read_bandwidth = cluster.node.nvme_write_bandwidth = 1e9;
  return cluster;
}

TrainingConfig offload_config(bool delayed) {
  TrainingConfig config = testing::mixed_adam(2, Precision::Bf16);
  config.zero.offload_optimizer.device = OffloadDevice::Cpu;
  config.zero.delay_param_update = delayed;
  return config;
}

double step_time(bool delayed, double cpu_bandwidth) {
  PlanRequest request;
  request.model = two_layers();
  request.config = offload_config(delayed);
  request.cluster = timing_cluster(cpu_bandwidth);
  request.dp_size = 1;
  const Plan plan = make_plan(request);
  TimelineOptions options;
  options.compute_efficiency = options.memory_efficiency = options.cpu_efficiency = 1.0;
  return simulate_timeline(plan.schedule, request.cluster, options).step_time;
}

// The step, by hand (one rank; the collectives of one rank take no time):
//   GPU  g = forward 1 + 1 ms, backward 2 + 2 ms = 6 ms;
//   D2H  d = the 2e6 bf16 gradients, 4e6 bytes / 4e9 = 1 ms;
//   CPU  c = CPU Adam touching 2e6 x (4 fp32 gradient + 2 x (4 master + 8 moments) + 2 bf16
//        parameter) = 60e6 bytes at the host's bandwidth: 10 ms at 6e9 bytes/s, 3 ms at 20e9;
//   H2D  h = the updated bf16 parameters, 4e6 bytes = 1 ms.
// Serial (ZeRO-Offload without DPU): g + d + c + h (one bucket, reduced after the backward).
// Delayed: the CPU updates the previous step's gradients from time 0 beside the forward and
// backward; this step's gradients cross once both are done (the host buffer is read by the
// update), and the updated parameters cross once the backward no longer reads the old ones:
// max(g, c) + max(d, h).
TEST(DelayedParameterUpdate, OverlapsTheCpuStepWithTheNextForwardAndBackward) {
  EXPECT_NEAR(step_time(false, 6e9), 6e-3 + 1e-3 + 10e-3 + 1e-3, 1e-9);  // 18 ms
  EXPECT_NEAR(step_time(true, 6e9), 10e-3 + 1e-3, 1e-9);                 // 11 ms: CPU-bound
  EXPECT_NEAR(step_time(false, 20e9), 6e-3 + 1e-3 + 3e-3 + 1e-3, 1e-9);  // 11 ms
  EXPECT_NEAR(step_time(true, 20e9), 6e-3 + 1e-3, 1e-9);                 // 7 ms: GPU-bound
}

// The schedule of a delayed step: the CPU step comes first (the previous step's gradients), its
// gradient copies wait for it, and the write-back waits for the last backward.
TEST(DelayedParameterUpdate, TheScheduleStartsWithThePreviousStepsUpdate) {
  const Plan plan = testing::plan_of(two_layers(), offload_config(true), 1);
  const auto& ops = plan.schedule.ops;
  std::size_t step = ops.size(), forward = ops.size();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == OpKind::OptimizerStep && step == ops.size()) step = i;
    if (ops[i].kind == OpKind::Forward && forward == ops.size()) forward = i;
  }
  ASSERT_LT(step, forward);
  EXPECT_TRUE(ops[step].delayed);
  EXPECT_EQ(ops[step].stream, Stream::Cpu);
  int steps = 0;
  for (const Op& op : ops) steps += op.kind == OpKind::OptimizerStep;
  EXPECT_EQ(steps, 1);
  for (const Op& op : ops) {
    if (op.kind != OpKind::CopyD2H) continue;
    const auto deps = plan.schedule.deps_of(op);
    EXPECT_NE(std::find(deps.begin(), deps.end(), std::uint32_t(step)), deps.end());
  }
  // The same bytes move as without the delay: the update is displaced, not changed.
  const Plan serial = testing::plan_of(two_layers(), offload_config(false), 1);
  EXPECT_EQ(plan.comm.links, serial.comm.links);
}

TEST(DelayedParameterUpdate, ReadsTheForksKeyAndRefusesWhatItCannotDelay) {
  Diagnostics diagnostics;
  const json document = json::parse(R"({"train_micro_batch_size_per_gpu": 1,
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
                          "delay_param_update": true, "delay_param_update_warmup": 40}})");
  const TrainingConfig config = parse_training_config(document, diagnostics);
  EXPECT_TRUE(config.zero.delay_param_update);
  EXPECT_EQ(config.zero.delay_param_update_warmup, 40);
  EXPECT_TRUE(diagnostics.warnings.empty());
  const auto error_of = [](TrainingConfig c) -> std::string {
    try {
      c.validate();
    } catch (const InputError& error) {
      return error.what();
    }
    return "";
  };
  TrainingConfig no_offload = offload_config(true);
  no_offload.zero.offload_optimizer.device = OffloadDevice::None;
  EXPECT_NE(error_of(no_offload)
                .find("zero_optimization.delay_param_update: overlaps the CPU "
                      "optimizer step"),
            std::string::npos);
  TrainingConfig stage3 = offload_config(true);
  stage3.zero.stage = 3;
  EXPECT_NE(error_of(stage3).find("stage is 3"), std::string::npos);
  TrainingConfig nvme = offload_config(true);
  nvme.zero.offload_optimizer.device = OffloadDevice::Nvme;
  nvme.zero.offload_optimizer.nvme_path = "/nvme";
  EXPECT_NE(error_of(nvme).find("\"nvme\""), std::string::npos);
  ConfigOverrides flags;
  flags.delayed_param_update = true;
  flags.stage = 2;
  flags.offload_optimizer = OffloadDevice::Cpu;
  flags.delayed_param_update_warmup = 5;
  flags.micro_batch = 1;
  const TrainingConfig flagged =
      parse_training_config(json::object(), diagnostics, std::nullopt, flags);
  EXPECT_TRUE(flagged.zero.delay_param_update);
  EXPECT_EQ(flagged.zero.delay_param_update_warmup, 5);
}

}  // namespace
}  // namespace zerolens
