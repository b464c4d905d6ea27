// The timeline against hand-computed cases: three layers, two ranks, bandwidths chosen so every
// op time is a round number (worked below), with and without overlap_comm.
#include <gtest/gtest.h>

#include "sim/timeline/timeline.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

// 1e6 FLOP/s, 1e6 bytes/s between GPUs, no latency: 1000 flops take 1 ms, 1000 bytes 1 ms.
Cluster slow_cluster() {
  Cluster cluster = testing::test_cluster(8);
  cluster.gpu.peak_flops_fp32 = cluster.gpu.peak_flops_fp16 = cluster.gpu.peak_flops_bf16 = 1e6;
  cluster.node.cpu_memory_bandwidth = 1e9;
  cluster.node.cpu_cores = 16;
  cluster.gpu.hbm_bandwidth = 1e15;
  cluster.node.nvme_read_bandwidth = cluster.node.nvme_write_bandwidth = 1e9;
  cluster.gpu.hbm_bandwidth = 1e15;
  cluster.node.intra_node = {"link", 1e6, 0};
  return cluster;
}

TimelineOptions exact_options() {
  TimelineOptions options;
  options.compute_efficiency = 1;
  options.memory_efficiency = 1;
  options.algorithm = CollectiveAlgorithm::Ring;
  return options;
}

// Three layers of 1000 fp32 parameters, 2000 forward flops each (one token), stage 2 on 2 ranks,
// one layer per reduce bucket.
Plan three_layer_plan(bool overlap, OffloadDevice optimizer = OffloadDevice::None) {
  Model model = testing::flat_model(3, 1000);
  for (auto& layer : model.layers) layer.matmul_flops_per_token = 2000;
  TrainingConfig config = testing::mixed_adam(2, Precision::Fp32);
  config.zero.reduce_bucket_size = 1000;
  config.zero.overlap_comm = overlap;
  config.zero.offload_optimizer.device = optimizer;
  return testing::plan_of(model, config, 2, 8, true);
}

// Worked by hand (ms): forward 2 each (0-6); backward 4 each: B2 6-10, B1 10-14. The bucket of
// layer 2 is reduced from the hook of layer 1's gradient: a reduce-scatter of 4000 bytes over 2
// ranks sends 2000 bytes = 2 ms, 14-16.
//   overlap:    B0 14-18 runs beside it; RS(L1) 18-20; RS(L0) 20-22.
//   no overlap: B0 waits, 16-20; RS(L1) 20-22; RS(L0) 22-24.
// Then the gradient-norm all-reduce (4 bytes: 2 x 2 bytes = 4 us), the optimizer on the 1500
// owned elements (12 flops each = 18 ms), and the all-gather of the 12000-byte updated parameters
// (6000 bytes sent = 6 ms).
TEST(Timeline, ThreeLayersTwoRanksWorkedByHand) {
  const double ms = 1e-3;
  const Timeline overlapped = simulate_timeline(three_layer_plan(true).schedule, slow_cluster(), exact_options());
  const Timeline serial = simulate_timeline(three_layer_plan(false).schedule, slow_cluster(), exact_options());
  EXPECT_NEAR(overlapped.step_time, (22 + 0.004 + 18 + 6) * ms, 1e-9);
  EXPECT_NEAR(serial.step_time, (24 + 0.004 + 18 + 6) * ms, 1e-9);
  // Exposed: overlap hides RS(L2) under B0; without overlap all 12.004 ms of communication show.
  EXPECT_NEAR(overlapped.exposed_communication, (2 + 2 + 0.004 + 6) * ms, 1e-9);
  EXPECT_NEAR(serial.exposed_communication, (2 + 2 + 2 + 0.004 + 6) * ms, 1e-9);
  EXPECT_NEAR(overlapped.busy[std::size_t(Stream::Compute)], (6 + 12 + 18) * ms, 1e-9);
  EXPECT_EQ(overlapped.exposed_offload, 0);  // nothing offloaded
}

// Each call of a collective pays its latency: the persistent gather of 4 tensors of 1000 fp32
// elements over 2 ranks is 4 calls (one per parameter, as DeepSpeed launches them); with a 1 ms
// link latency each call costs 1 ms (ring, 2 ranks: one step) and the 8000 bytes sent take 8 ms:
// 4 + 8 ms, where one call would take 1 + 8.
TEST(Timeline, EachCallOfACollectivePaysItsLatency) {
  const double ms = 1e-3;
  const Model model = testing::flat_model(4, 1000);
  TrainingConfig config = testing::mixed_adam(3, Precision::Fp32);
  config.zero.stage3_param_persistence_threshold = 1000;
  const Plan plan = testing::plan_of(model, config, 2);
  Cluster cluster = slow_cluster();
  cluster.node.intra_node.latency = 1 * ms;
  int gathers = 0;
  for (const Op& op : plan.schedule.ops) {
    if (op.kind != OpKind::AllGather) continue;
    ++gathers;
    EXPECT_NEAR(op_duration(op, plan.schedule.context, cluster, exact_options()), (4 + 8) * ms,
                1e-12);
    Op one_call = op;
    one_call.calls = 1;
    EXPECT_NEAR(op_duration(one_call, plan.schedule.context, cluster, exact_options()),
                (1 + 8) * ms, 1e-12);
  }
  EXPECT_EQ(gathers, 1);
}

// Issue 21: "exposed comm" counted the CPU optimizer. With the optimizer on the host the step's
// tail is the gradient's copy to the host, CPU Adam and the parameters' copy back, none of them a
// collective: they are exposed offload time, and the collectives' exposed time is what it was.
TEST(Timeline, OffloadTimeIsExposedApartFromCommunication) {
  const Plan plan = three_layer_plan(false, OffloadDevice::Cpu);
  const Timeline timeline = simulate_timeline(plan.schedule, slow_cluster(), exact_options());
  double host_optimizer = 0, copies = 0;
  for (std::size_t i = 0; i < plan.schedule.ops.size(); ++i) {
    const Op& op = plan.schedule.ops[i];
    if (op.stream == Stream::Cpu) host_optimizer += timeline.ops[i].duration;
    if (op.stream == Stream::H2D || op.stream == Stream::D2H) copies += timeline.ops[i].duration;
  }
  ASSERT_GT(host_optimizer, 0);
  // The update runs after the last backward, compute idle: all of it is exposed, as offload.
  EXPECT_GE(timeline.exposed_offload, host_optimizer - 1e-12);
  EXPECT_LE(timeline.exposed_offload, host_optimizer + copies + 1e-12);
  // The collectives are the serial plan's: three reduce-scatters, the norm, the all-gather.
  const Timeline on_gpu =
      simulate_timeline(three_layer_plan(false).schedule, slow_cluster(), exact_options());
  EXPECT_NEAR(timeline.exposed_communication, on_gpu.exposed_communication, 1e-9);
}

TEST(Timeline, StreamsNeverRunTwoOpsAtOnceAndDependenciesHold) {
  for (int stage = 0; stage <= 3; ++stage) {
    TrainingConfig config = testing::mixed_adam(stage);
    config.zero.reduce_bucket_size = 3000;
    if (stage >= 1) config.zero.offload_optimizer.device = OffloadDevice::Cpu;
    config.batch.gradient_accumulation_steps = 2;
    const Plan plan = testing::plan_of(testing::flat_model(7, 2000), config, 16, 8);
    const Timeline timeline = simulate_timeline(plan.schedule, slow_cluster(), exact_options());
    std::array<double, kStreamCount> stream_end{};
    for (std::size_t i = 0; i < plan.schedule.ops.size(); ++i) {
      const Op& op = plan.schedule.ops[i];
      EXPECT_GE(timeline.ops[i].start, stream_end[std::size_t(op.stream)] - 1e-15) << "stage " << stage << " op " << i;
      stream_end[std::size_t(op.stream)] = timeline.ops[i].end();
      for (const auto dep : plan.schedule.deps_of(op)) EXPECT_GE(timeline.ops[i].start, timeline.ops[dep].end() - 1e-15);
      EXPECT_LE(timeline.ops[i].end(), timeline.step_time + 1e-15);
    }
  }
}

// nccl-tests bus-bandwidth factors per level: 16 ranks as 2 nodes x 8. An all-reduce of S bytes
// sends 2 x 7/8 S over NVLink and 2 x 1/2 x S/8 over the network.
TEST(Collectives, HierarchicalRingMatchesTheBusBandwidthFactors) {
  Cluster cluster = slow_cluster();
  cluster.node.intra_node = {"nvlink", 100e9, 2e-6};
  cluster.inter_node = {"ib", 10e9, 5e-6};
  const Bytes s = 800'000'000;
  const double expected = 2 * 7.0 / 8 * double(s) / 100e9 + 2 * 0.5 * double(s) / 8 / 10e9 + 2 * (7 * 2e-6 + 1 * 5e-6);
  EXPECT_NEAR(collective_seconds(OpKind::AllReduce, s, 16, cluster, CollectiveAlgorithm::Ring), expected, 1e-12);
  const double gather = 7.0 / 8 * double(s) / 100e9 + 0.5 * double(s) / 8 / 10e9 + 7 * 2e-6 + 5e-6;
  EXPECT_NEAR(collective_seconds(OpKind::AllGather, s, 16, cluster, CollectiveAlgorithm::Ring), gather, 1e-12);
  EXPECT_NEAR(collective_seconds(OpKind::ReduceScatter, s, 16, cluster, CollectiveAlgorithm::Auto), gather, 1e-12);
  EXPECT_EQ(collective_seconds(OpKind::AllReduce, s, 1, cluster, CollectiveAlgorithm::Ring), 0);
}

TEST(Collectives, TreeWinsForSmallAllReducesOnly) {
  Cluster cluster = slow_cluster();
  cluster.node.intra_node = {"nvlink", 100e9, 2e-6};
  cluster.inter_node = {"ib", 10e9, 5e-6};
  // 4 bytes on 64 ranks (8 nodes): ring latency 2 x (7 x 2 + 7 x 5) us = 98 us; tree 2 x (3 x 2 + 3 x 5) = 42 us.
  const double ring = collective_seconds(OpKind::AllReduce, 4, 64, cluster, CollectiveAlgorithm::Ring);
  const double tree = collective_seconds(OpKind::AllReduce, 4, 64, cluster, CollectiveAlgorithm::Tree);
  EXPECT_NEAR(ring, 98e-6, 1e-9);
  EXPECT_NEAR(tree, 42e-6, 1e-9);
  EXPECT_DOUBLE_EQ(collective_seconds(OpKind::AllReduce, 4, 64, cluster, CollectiveAlgorithm::Auto), tree);
}

TEST(Timeline, RejectsAClusterWithoutRates) {
  Cluster cluster = slow_cluster();
  cluster.node.cpu_memory_bandwidth = 0;
  EXPECT_THROW(simulate_timeline(three_layer_plan(true).schedule, cluster, exact_options()), InputError);
}

TEST(Timeline, NvmeOffloadWithoutNvmeBandwidthIsAnError) {
  TrainingConfig config = testing::mixed_adam(3);
  config.zero.offload_optimizer.device = OffloadDevice::Nvme;
  config.zero.offload_optimizer.nvme_path = "/nvme";
  const Plan plan = testing::plan_of(testing::flat_model(4, 200'000), config, 2, 8);
  Cluster cluster = slow_cluster();
  cluster.node.nvme_capacity_bytes = 0;
  cluster.node.nvme_read_bandwidth = cluster.node.nvme_write_bandwidth = 0;
  try {
    simulate_timeline(plan.schedule, cluster, exact_options());
    FAIL() << "expected an error";
  } catch (const InputError& error) {
    EXPECT_EQ(error.where().rfind("cluster.node.nvme_", 0), 0u) << error.where();
  }
}

// ZeRO-Infinity's optimizer on 3 sub-groups whose read, update and write each take the same time
// t (rates below). Serial swapping (one buffer set): r0 u0 w0 r1 u1 w1 r2 u2 w2 = 9t. With
// pipeline_read and pipeline_write and buffers for two sub-groups (2 x 4), worked by hand (units of t):
// NVMe r0 0-1, r1 1-2, w0 2-3 (after u0 1-2), r2 3-4 (its set freed by w0), w1 4-5 (u1 2-3),
// w2 5-6 (u2 4-5): the drive is never idle, 6t. Without pipeline_write each update also waits
// for the previous write: u1 3-4 (after w0), w1 4-5, u2 5-6 (after w1), w2 6-7: 7t.
TEST(Timeline, PipelinedOptimizerSwappingWorkedByHand) {
  const auto swap_span = [](bool pipeline_read, bool pipeline_write, int buffer_count) {
    TrainingConfig config = testing::mixed_adam(3);
    config.zero.offload_optimizer.device = OffloadDevice::Nvme;
    config.zero.offload_optimizer.nvme_path = "/nvme";
    config.zero.offload_optimizer.pipeline_read = pipeline_read;
    config.zero.offload_optimizer.pipeline_write = pipeline_write;
    config.zero.offload_optimizer.buffer_count = buffer_count;
    config.zero.sub_group_size = 1000;
    const Plan plan = testing::plan_of(testing::flat_model(3, 1000), config, 1, 1);
    Cluster cluster = slow_cluster();
    cluster.node.gpus_per_node = 1;
    // fp16 Adam per element: read and write 12 bytes (master and two states) at 1e9 bytes/s; the
    // update touches 4 + 2 x 12 + 2 = 30 bytes at 2.5e9 bytes/s: 12 ns each.
    cluster.node.cpu_memory_bandwidth = 2.5e9;
    TimelineOptions options = exact_options();
    options.cpu_efficiency = 1;
    const Timeline timeline = simulate_timeline(plan.schedule, cluster, options);
    double first = 1e300, last = 0;
    for (std::size_t i = 0; i < plan.schedule.ops.size(); ++i) {
      const Op& op = plan.schedule.ops[i];
      if (op.sub_group < 0) continue;
      EXPECT_NEAR(timeline.ops[i].duration, 12e-6, 1e-15) << to_string(op.kind) << " " << op.sub_group;
      first = std::min(first, timeline.ops[i].start);
      last = std::max(last, timeline.ops[i].end());
    }
    return (last - first) / 12e-6;
  };
  EXPECT_NEAR(swap_span(false, false, 4), 9, 1e-9);
  EXPECT_NEAR(swap_span(true, true, 8), 6, 1e-9);
  EXPECT_NEAR(swap_span(true, false, 8), 7, 1e-9);
  EXPECT_NEAR(swap_span(true, true, 7), 9, 1e-9);  // buffers for one sub-group only: serial
}

TEST(Timeline, RatesFollowFromTheStepTime) {
  const Plan plan = three_layer_plan(true);
  const Timeline timeline = simulate_timeline(plan.schedule, slow_cluster(), exact_options());
  // 2 ranks x 1 token per step; 3 x (2000 forward + 4000 backward) flops per GPU per step.
  EXPECT_NEAR(timeline.tokens_per_second, 2 / timeline.step_time, 1e-9);
  EXPECT_NEAR(timeline.model_flops_per_gpu, 18000 / timeline.step_time, 1e-6);
  EXPECT_NEAR(timeline.mfu, timeline.model_flops_per_gpu / 1e6, 1e-12);
  // Memory over time ends where the replay ends and is sorted by time.
  ASSERT_FALSE(timeline.memory.empty());
  for (std::size_t i = 1; i < timeline.memory.size(); ++i) EXPECT_LE(timeline.memory[i - 1].time, timeline.memory[i].time);
}

// V100 has no bf16: pricing its matrix products at a zero rate would give a meaningless step time.
TEST(Timeline, PrecisionWithoutHardwareSupportIsAnInputError) {
  Cluster cluster = slow_cluster();
  cluster.gpu.peak_flops_bf16 = 0;
  TrainingConfig config = testing::mixed_adam(2, Precision::Bf16);
  const Plan plan = testing::plan_of(testing::flat_model(3, 1000), config, 2, 8, true);
  EXPECT_THROW(simulate_timeline(plan.schedule, cluster, exact_options()), InputError);
  config.precision.precision = Precision::Fp16;
  const Plan fp16 = testing::plan_of(testing::flat_model(3, 1000), config, 2, 8, true);
  EXPECT_GT(simulate_timeline(fp16.schedule, cluster, exact_options()).step_time, 0);
}

}  // namespace
}  // namespace zerolens
