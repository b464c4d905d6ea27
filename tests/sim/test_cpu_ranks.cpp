// The CPU backend's step on a calibrated cluster (sim/timeline/cpu_ranks.hpp) against hand-worked
// cases: ops one after another on one thread, ranks beyond the cores sharing them, layers and
// collectives at the calibrated costs; and the calibration's JSON.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sim/hardware/cluster_json.hpp"
#include "sim/schedule/memory_replay.hpp"
#include "sim/timeline/cpu_ranks.hpp"
#include "sim/timeline/timeline.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

constexpr double ms = 1e-3;

// Three generic layers of 1000 fp32 parameters, 2000 forward FLOPs each (one token), stage 2 on 2
// ranks, one layer per reduce bucket (as tests/sim/test_timeline.cpp's worked case).
Plan three_layer_plan() {
  Model model = testing::flat_model(3, 1000);
  for (auto& layer : model.layers) layer.matmul_flops_per_token = 2000;
  TrainingConfig config = testing::mixed_adam(2, Precision::Fp32);
  config.zero.reduce_bucket_size = 1000;
  config.zero.overlap_comm = true;
  return testing::plan_of(model, config, 2, 8, true);
}

// Calibrated on the CPU backend: 1 us per matrix-product FLOP (forward 2 ms, backward 4 ms per
// layer: generic layers cost what blocks do), a group of 2 ranks 1 ms per call and 1e6 bus bytes/s,
// the fp32 optimizer 0.1 us per byte touched, the engine's other work free; `cores` cores.
Cluster calibrated(int cores) {
  Cluster cluster = testing::test_cluster(8);
  cluster.gpu.peak_flops_fp32 = cluster.gpu.peak_flops_fp16 = cluster.gpu.peak_flops_bf16 = 1e9;
  cluster.gpu.hbm_bandwidth = 1e9;
  cluster.node.cpu_memory_bandwidth = 1e9;
  cluster.node.cpu_cores = cores;
  cluster.node.nvme_read_bandwidth = cluster.node.nvme_write_bandwidth = 1e9;
  ClusterCalibration c;
  c.device = "cpu";
  c.ranks = 2;
  c.collectives = {{2, 1 * ms, 1e6}};
  c.forward[std::size_t(LayerKind::TransformerBlock)] = {1e-6, 0, 0};
  c.backward[std::size_t(LayerKind::TransformerBlock)] = {1e-6, 0, 0};
  c.engine.optimizer_per_byte = 1e-7;
  cluster.calibration = c;
  return cluster;
}

Timeline cpu_timeline(const Plan& plan, const Cluster& cluster) {
  return simulate_timeline(plan.schedule, plan.request.model, cluster, TimelineOptions{},
                           replay_memory(plan.schedule, ReplayDetail::PerOp));
}

// Worked by hand (ms), every op after the one before: forward 3 x 2 = 6; backward 3 x 4 = 12; three
// reduce-scatters of 4000 bytes over 2 ranks, each 1 + 2000 bytes sent / 1e6 = 3, 9 in all; the
// gradient-norm all-reduce of 4 bytes, 1 + 4 bytes sent = 1.004; the optimizer on 1500 owned fp32
// elements, 1500 x 24 bytes touched x 0.1 us = 3.6; the all-gather of 12000 bytes, 1 + 6000 sent =
// 7. With one core for the two ranks, the ranks' own work takes twice as long (6 + 12 + 3.6) while
// MPI's part, calibrated with the group's ranks running, does not.
TEST(CpuRanks, ThreeLayersTwoRanksWorkedByHand) {
  const Plan plan = three_layer_plan();
  const Timeline two_cores = cpu_timeline(plan, calibrated(2));
  EXPECT_NEAR(two_cores.step_time, (6 + 12 + 9 + 1.004 + 3.6 + 7) * ms, 1e-9);
  const Timeline one_core = cpu_timeline(plan, calibrated(1));
  EXPECT_NEAR(one_core.step_time, (2 * (6 + 12 + 3.6) + 9 + 1.004 + 7) * ms, 1e-9);
  // One thread: each op starts where the one before it ended, whatever its stream.
  for (std::size_t i = 1; i < two_cores.ops.size(); ++i) {
    EXPECT_NEAR(two_cores.ops[i].start, two_cores.ops[i - 1].end(), 1e-12) << i;
  }
  EXPECT_NEAR(two_cores.exposed_communication, (9 + 1.004 + 7) * ms, 1e-9);
}

// ranks on the node x threads per rank / cores, never below 1.
TEST(CpuRanks, ShareOfTheCoresIsRanksOverCores) {
  Cluster cluster = calibrated(2);
  ScheduleContext context;
  context.gpus_per_node = 8;
  for (const auto& [ranks, share] : {std::pair{1, 1.0}, {2, 1.0}, {3, 1.5}, {4, 2.0}, {8, 4.0}}) {
    context.dp_size = ranks;
    EXPECT_DOUBLE_EQ(cpu_share(context, cluster), share) << ranks << " ranks";
  }
  context.dp_size = 16;  // 8 per node: the other 8 run on another node's cores
  EXPECT_DOUBLE_EQ(cpu_share(context, cluster), 4.0);
  cluster.calibration->threads_per_rank = 2;
  context.dp_size = 2;
  EXPECT_DOUBLE_EQ(cpu_share(context, cluster), 2.0);
}

// Measured occupancy replaces the ideal sharing up to the largest measured count, which scales by
// the ideal beyond it: 2 ranks 1.1 (a core each, waiting for the slower), 4 ranks 2.6 (the
// scheduler's and the cache's share beyond 2), 8 ranks 2.6 x 4 / 2.
TEST(CpuRanks, MeasuredOccupancyReplacesTheIdealSharing) {
  Cluster cluster = calibrated(2);
  cluster.calibration->occupancy = {{1, 1.0}, {2, 1.1}, {4, 2.6}};
  ScheduleContext context;
  context.gpus_per_node = 8;
  for (const auto& [ranks, share] :
       {std::pair{1, 1.0}, {2, 1.1}, {3, 1.1 * 1.5}, {4, 2.6}, {8, 2.6 * 2}}) {
    context.dp_size = ranks;
    EXPECT_DOUBLE_EQ(cpu_share(context, cluster), share) << ranks << " ranks";
  }
}

// A collective launched as several calls pays the latency per call: stage 3's gather of 4
// persistent tensors of 1000 fp32 elements (250 per rank) on 4 ranks is 4 calls of the 4-rank
// group (5 ms each) and 3 x 4000 bytes sent per rank at 1e6 bytes/s: 20 + 12 ms.
TEST(CpuRanks, EachCallOfACollectivePaysTheLatency) {
  const Model model = testing::flat_model(4, 1000);
  TrainingConfig config = testing::mixed_adam(3, Precision::Fp32);
  config.zero.stage3_param_persistence_threshold = 1000;
  Cluster cluster = calibrated(4);
  cluster.calibration->collectives = {{2, 1 * ms, 1e6}, {4, 5 * ms, 1e6}};
  const Plan plan = testing::plan_of(model, config, 4);
  int gathers = 0;
  for (const Op& op : plan.schedule.ops) {
    if (op.kind != OpKind::AllGather) continue;
    ++gathers;
    EXPECT_EQ(op.calls, 4);
    EXPECT_NEAR(cpu_rank_op_seconds(op, plan.schedule, model, cluster), (4 * 5 + 12) * ms, 1e-12);
  }
  EXPECT_EQ(gathers, 1);
}

// The step of 4 ranks on 2 cores (oversubscribed) against 2 ranks on 2 cores: the same layers, so
// the compute doubles exactly.
TEST(CpuRanks, OversubscribedRanksTakeTwiceTheComputeWorkedByHand) {
  Model model = testing::flat_model(1, 1000);
  model.layers[0].matmul_flops_per_token = 2000;
  const TrainingConfig config = testing::mixed_adam(0, Precision::Fp32);
  Cluster cluster = calibrated(2);
  cluster.calibration->collectives = {{2, 1 * ms, 1e6}, {4, 5 * ms, 1e6}};
  const Plan two = testing::plan_of(model, config, 2, 8, true);
  const Plan four = testing::plan_of(model, config, 4, 8, true);
  // Forward 2, backward 4, the stage-0 optimizer on 1000 fp32 elements x 24 bytes x 0.1 us = 2.4;
  // the all-reduce of 4000 bytes: 2 ranks send 4000 bytes (1 + 4 ms), 4 ranks 6000 (5 + 6 ms).
  EXPECT_NEAR(cpu_timeline(two, cluster).step_time, (2 + 4 + 2.4 + 5) * ms, 1e-9);
  EXPECT_NEAR(cpu_timeline(four, cluster).step_time, (2 * (2 + 4 + 2.4) + 11) * ms, 1e-9);
}

// An NVMe request: the calibrated cost of a request with as many ranks swapping at once as the
// node holds (the largest measured count not above it), and its bytes at the node's rate shared by
// those ranks. An optimizer sub-group's swap (its states) is one request: 2 ranks on the node,
// 0.4 ms + 1 MB x 2 / 1 GB/s = 2.4 ms for a write, 0.1 + 2 ms for a read; 3 ranks take the 2-rank
// costs (0.4 + 3 ms); 1 rank its own (0.05 + 1 ms). A parameter swap issues a request per tensor
// partition at the tensor cost: 5 x 0.02 + 2 ms written, 5 x 0.03 + 2 ms read on 2 ranks.
TEST(CpuRanks, NvmeRequestsCostWhatTheNodesRanksSwappingAtOnceMeasured) {
  Cluster cluster = calibrated(2);
  cluster.calibration->nvme_requests = {{1, 0.01 * ms, 0.05 * ms, 0, 0, 0, 0},
                                        {2, 0.1 * ms, 0.4 * ms, 0.03 * ms, 0.02 * ms},
                                        {4, 9 * ms, 9 * ms, 9 * ms, 9 * ms}};
  Schedule schedule;
  schedule.context.dp_size = 2;
  schedule.context.gpus_per_node = 8;
  const Model model;
  Op write{.kind = OpKind::NvmeWrite,
           .stream = Stream::Nvme,
           .sub_group = 0,
           .link = Link::NvmeWrite,
           .bytes = 1'000'000,
           .swapped = Swapped::OptimizerStates};
  Op read{.kind = OpKind::NvmeRead,
          .stream = Stream::Nvme,
          .sub_group = 0,
          .link = Link::NvmeRead,
          .bytes = 1'000'000,
          .swapped = Swapped::OptimizerStates};
  EXPECT_NEAR(cpu_rank_op_seconds(write, schedule, model, cluster), 2.4 * ms, 1e-12);
  EXPECT_NEAR(cpu_rank_op_seconds(read, schedule, model, cluster), 2.1 * ms, 1e-12);
  Op param_write = write, param_read = read;
  param_write.sub_group = param_read.sub_group = -1;
  param_write.swapped = param_read.swapped = Swapped::Parameters;
  param_write.io_requests = param_read.io_requests = 5;
  EXPECT_NEAR(cpu_rank_op_seconds(param_write, schedule, model, cluster), 2.1 * ms, 1e-12);
  EXPECT_NEAR(cpu_rank_op_seconds(param_read, schedule, model, cluster), 2.15 * ms, 1e-12);
  // The parameters a sub-group's update completed are tensor requests too.
  param_write.sub_group = 1;
  EXPECT_NEAR(cpu_rank_op_seconds(param_write, schedule, model, cluster), 2.1 * ms, 1e-12);
  schedule.context.dp_size = 3;
  EXPECT_NEAR(cpu_rank_op_seconds(write, schedule, model, cluster), 3.4 * ms, 1e-12);
  schedule.context.dp_size = 1;
  EXPECT_NEAR(cpu_rank_op_seconds(write, schedule, model, cluster), 1.05 * ms, 1e-12);
  // Small requests' bytes beyond the node's rate, a parameter swap's only: 1 MB x 0.5 ns more on
  // the write, 1 MB x 0.25 ns on the read; the sub-group's swap as before.
  schedule.context.dp_size = 2;
  cluster.calibration->nvme_requests[1].tensor_write_per_byte = 0.5e-9;
  cluster.calibration->nvme_requests[1].tensor_read_per_byte = 0.25e-9;
  EXPECT_NEAR(cpu_rank_op_seconds(param_write, schedule, model, cluster), 2.6 * ms, 1e-12);
  EXPECT_NEAR(cpu_rank_op_seconds(param_read, schedule, model, cluster), 2.4 * ms, 1e-12);
  EXPECT_NEAR(cpu_rank_op_seconds(write, schedule, model, cluster), 2.4 * ms, 1e-12);
  // Not measured (no --nvme-path): the bytes alone (1 rank on the node).
  schedule.context.dp_size = 1;
  cluster.calibration->nvme_requests.clear();
  EXPECT_NEAR(cpu_rank_op_seconds(read, schedule, model, cluster), 1 * ms, 1e-12);
}

TEST(CpuRanks, LayerWorkCountsFlopsAndElementsPerToken) {
  Layer layer;
  layer.matmul_flops_per_token = 100;
  layer.attention_flops_per_token_position = 10;
  layer.activations.elements = 7;
  layer.activations.elements_per_position = 2;
  layer.activations.checkpoint_elements = 1;
  layer.activations.backward_working_elements = 3;
  // 4 x 8 = 32 tokens of 8 positions.
  const LayerWork forward = layer_work(layer, 4, 8, false);
  EXPECT_DOUBLE_EQ(forward.matmul_flops, 3200);
  EXPECT_DOUBLE_EQ(forward.attention_flops, 32 * 8 * 10);
  EXPECT_DOUBLE_EQ(forward.elements, 32 * (7 + 2 * 8 + 1 + 3));
  const LayerWork backward = layer_work(layer, 4, 8, true);
  EXPECT_DOUBLE_EQ(backward.matmul_flops, 6400);
  EXPECT_DOUBLE_EQ(backward.attention_flops, 2 * 32 * 8 * 10);
  EXPECT_DOUBLE_EQ(backward.elements, forward.elements);
  EXPECT_DOUBLE_EQ(layer_seconds(forward, {1e-9, 1e-8, 1e-7}), 3200e-9 + 2560e-8 + 864e-7);
}

TEST(CpuRanks, CollectivesOfTheLargestMeasuredGroupNotAbove) {
  ClusterCalibration c;
  c.collectives = {{2, 1e-6, 1e9}, {4, 2e-5, 2e8}};
  EXPECT_EQ(c.collectives_of(1), nullptr);
  EXPECT_EQ(c.collectives_of(2)->ranks, 2);
  EXPECT_EQ(c.collectives_of(3)->ranks, 2);
  EXPECT_EQ(c.collectives_of(4)->ranks, 4);
  EXPECT_EQ(c.collectives_of(16)->ranks, 4);
}

// Without a calibration, or calibrated on a GPU, the streams overlap as before.
TEST(CpuRanks, OtherClustersKeepTheOverlappingTimeline) {
  const Plan plan = three_layer_plan();
  Cluster cluster = calibrated(2);
  const MemoryTimeline replay = replay_memory(plan.schedule, ReplayDetail::PerOp);
  for (const bool gpu : {false, true}) {
    if (gpu) {
      cluster.calibration->device = "cuda";
    } else {
      cluster.calibration.reset();
    }
    const Timeline with_model =
        simulate_timeline(plan.schedule, plan.request.model, cluster, TimelineOptions{}, replay);
    const Timeline without = simulate_timeline(plan.schedule, cluster, TimelineOptions{}, replay);
    EXPECT_DOUBLE_EQ(with_model.step_time, without.step_time);
  }
}

TEST(CpuRanks, CalibrationRoundTripsThroughTheClusterJson) {
  Cluster cluster = calibrated(2);
  cluster.calibration->threads_per_rank = 3;
  cluster.calibration->forward[std::size_t(LayerKind::LmHead)] = {2e-11, 0, 3e-9};
  cluster.calibration->engine.copy_per_byte = 4e-10;
  cluster.calibration->occupancy = {{4, 2.5}, {1, 1.0}};
  cluster.calibration->collectives[0].sixteen_bit_reduce_latency = 2 * ms;
  cluster.calibration->collectives[0].sixteen_bit_reduce_bandwidth = 3e6;
  cluster.calibration->engine.reduce_scatter_fp32_per_byte = 6e-10;
  cluster.calibration->nvme_requests = {{4, 2e-4, 5e-4, 6e-5, 7e-5, 8e-10, 9e-10},
                                        {1, 1e-4, 4e-4, 0, 0, 0, 0}};
  cluster.calibration->reference_step_seconds = 0.0348;
  Diagnostics diagnostics;
  const Cluster read =
      cluster_from_json(nlohmann::json::parse(cluster_to_json(cluster).dump()), diagnostics);
  EXPECT_TRUE(diagnostics.warnings.empty());
  ASSERT_TRUE(read.calibration.has_value());
  EXPECT_EQ(read.calibration->device, "cpu");
  EXPECT_EQ(read.calibration->threads_per_rank, 3);
  ASSERT_EQ(read.calibration->collectives.size(), 1u);
  EXPECT_DOUBLE_EQ(read.calibration->collectives[0].latency, 1 * ms);
  EXPECT_DOUBLE_EQ(read.calibration->collectives[0].sixteen_bit_reduce_latency, 2 * ms);
  EXPECT_DOUBLE_EQ(read.calibration->collectives[0].sixteen_bit_reduce_bandwidth, 3e6);
  EXPECT_DOUBLE_EQ(read.calibration->engine.reduce_scatter_fp32_per_byte, 6e-10);
  EXPECT_DOUBLE_EQ(read.calibration->forward[std::size_t(LayerKind::LmHead)].per_element, 3e-9);
  EXPECT_DOUBLE_EQ(
      read.calibration->backward[std::size_t(LayerKind::TransformerBlock)].per_matmul_flop, 1e-6);
  EXPECT_DOUBLE_EQ(read.calibration->engine.copy_per_byte, 4e-10);
  EXPECT_DOUBLE_EQ(read.calibration->engine.optimizer_per_byte, 1e-7);
  ASSERT_EQ(read.calibration->occupancy.size(), 2u);
  EXPECT_EQ(read.calibration->occupancy[0].ranks, 1);  // sorted
  EXPECT_DOUBLE_EQ(read.calibration->occupancy[1].factor, 2.5);
  ASSERT_EQ(read.calibration->nvme_requests.size(), 2u);
  EXPECT_EQ(read.calibration->nvme_requests[0].ranks, 1);  // sorted
  EXPECT_DOUBLE_EQ(read.calibration->nvme_requests[0].write_latency, 4e-4);
  EXPECT_DOUBLE_EQ(read.calibration->nvme_requests[1].read_latency, 2e-4);
  EXPECT_DOUBLE_EQ(read.calibration->nvme_requests[1].tensor_read_latency, 6e-5);
  EXPECT_DOUBLE_EQ(read.calibration->nvme_requests[1].tensor_write_latency, 7e-5);
  EXPECT_DOUBLE_EQ(read.calibration->nvme_requests[1].tensor_read_per_byte, 8e-10);
  EXPECT_DOUBLE_EQ(read.calibration->nvme_requests[1].tensor_write_per_byte, 9e-10);
  EXPECT_DOUBLE_EQ(read.calibration->reference_step_seconds, 0.0348);
  // A datasheet cluster is not calibrated, and says nothing about it.
  const nlohmann::json preset = cluster_to_json(cluster_from_preset("dgx-a100-80gb"));
  EXPECT_FALSE(preset.contains("calibration"));
  EXPECT_FALSE(cluster_from_json(preset, diagnostics).calibration.has_value());
}

TEST(CpuRanks, BadCalibrationValuesNameTheKey) {
  nlohmann::json document = cluster_to_json(calibrated(2));
  document["calibration"]["collectives"][0]["bandwidth"] = 0;
  Diagnostics diagnostics;
  try {
    cluster_from_json(document, diagnostics);
    FAIL() << "a zero bandwidth was accepted";
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "calibration.collectives[0].bandwidth");
  }
  document = cluster_to_json(calibrated(2));
  document["calibration"]["layers"]["transformer_blok"] =
      document["calibration"]["layers"]["transformer_block"];
  try {
    cluster_from_json(document, diagnostics);
    FAIL() << "an unknown layer kind was accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("transformer_block"), std::string::npos)
        << error.what();
  }
}

// A collective's wire format picks its costs. The worked case in bf16 (same 3 layers, 16-bit
// gradients and parameters: reduce-scatters of 2000 bytes, 1000 sent each): with 16-bit reduction
// figures of 3 ms per call and 5e5 bus bytes/s, each reduce-scatter is 3 + 1000 / 5e5 = 5 ms (15);
// the gradient-norm (a scalar) and the all-gather of 6000 bytes (3000 sent, 1 + 3 = 4 ms) keep
// fp32's figures: an all-gather reduces nothing. The engine's own work per message byte: 16-bit
// messages at all_gather_per_byte, fp32 ones at all_gather_fp32_per_byte.
TEST(CpuRanks, SixteenBitReductionsAndFp32MessagesTakeTheirOwnCosts) {
  Model model = testing::flat_model(3, 1000);
  for (auto& layer : model.layers) layer.matmul_flops_per_token = 2000;
  TrainingConfig config = testing::mixed_adam(2, Precision::Bf16);
  config.zero.reduce_bucket_size = 1000;
  config.zero.overlap_comm = true;
  const Plan plan = testing::plan_of(model, config, 2, 8, true);
  Cluster cluster = calibrated(2);
  cluster.calibration->collectives[0].sixteen_bit_reduce_latency = 3 * ms;
  cluster.calibration->collectives[0].sixteen_bit_reduce_bandwidth = 5e5;
  double reduce = 0, gather = 0, norm = 0;
  for (const Op& op : plan.schedule.ops) {
    const double seconds = cpu_rank_op_seconds(op, plan.schedule, model, cluster);
    if (op.kind == OpKind::ReduceScatter) {
      EXPECT_EQ(op.wire_element_bytes, 2);
      reduce += seconds;
    }
    if (op.kind == OpKind::AllGather) {
      EXPECT_EQ(op.wire_element_bytes, 2);
      gather += seconds;
    }
    if (op.kind == OpKind::GradNorm) norm += seconds;
  }
  EXPECT_NEAR(reduce, 15 * ms, 1e-12);
  EXPECT_NEAR(gather, 4 * ms, 1e-12);
  EXPECT_NEAR(norm, 1.004 * ms, 1e-12);
  Op fp32{.kind = OpKind::AllGather, .group_size = 1, .bytes = 1000, .wire_element_bytes = 4};
  Op half = fp32;
  half.wire_element_bytes = 2;
  cluster.calibration->engine.all_gather_per_byte = 2e-9;
  EXPECT_NEAR(cpu_rank_op_seconds(half, plan.schedule, model, cluster), 2e-6, 1e-15);
  EXPECT_NEAR(cpu_rank_op_seconds(fp32, plan.schedule, model, cluster), 2e-6, 1e-15);  // unmeasured
  cluster.calibration->engine.all_gather_fp32_per_byte = 5e-10;
  EXPECT_NEAR(cpu_rank_op_seconds(fp32, plan.schedule, model, cluster), 5e-7, 1e-15);
}

// A calibration written before the per-count NVMe costs held one rank's: it reads as a 1-rank
// entry; both forms at once, a repeated count or a missing count are refused, naming the key.
TEST(CpuRanks, NvmeRequestCostsReadTheEarlierFormAndRefuseBadOnes) {
  nlohmann::json document = cluster_to_json(calibrated(2));
  nlohmann::json& block = document["calibration"];
  block.erase("nvme_requests");
  block["nvme_read_latency"] = 1e-4;
  block["nvme_write_latency"] = 3e-4;
  Diagnostics diagnostics;
  const Cluster earlier = cluster_from_json(document, diagnostics);
  ASSERT_EQ(diagnostics.warnings.size(), 1u);
  EXPECT_NE(diagnostics.warnings[0].find("calibrate --nvme-path again"), std::string::npos);
  ASSERT_EQ(earlier.calibration->nvme_requests.size(), 1u);
  EXPECT_EQ(earlier.calibration->nvme_requests[0].ranks, 1);
  EXPECT_DOUBLE_EQ(earlier.calibration->nvme_requests[0].read_latency, 1e-4);
  EXPECT_DOUBLE_EQ(earlier.calibration->nvme_requests[0].write_latency, 3e-4);
  const auto refusal = [&](const nlohmann::json& bad) {
    try {
      cluster_from_json(bad, diagnostics);
    } catch (const InputError& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  nlohmann::json both = document;
  both["calibration"]["nvme_requests"] = nlohmann::json::array();
  EXPECT_NE(refusal(both).find("calibration.nvme_requests"), std::string::npos) << refusal(both);
  block.erase("nvme_read_latency");
  block.erase("nvme_write_latency");
  block["nvme_requests"] = {{{"ranks", 2}, {"read_latency", 1e-4}},
                            {{"ranks", 2}, {"write_latency", 1e-4}}};
  EXPECT_NE(refusal(document).find("calibration.nvme_requests[1].ranks"), std::string::npos)
      << refusal(document);
  block["nvme_requests"] = {{{"read_latency", 1e-4}}};
  EXPECT_NE(refusal(document).find("calibration.nvme_requests[0].ranks: missing"),
            std::string::npos)
      << refusal(document);
  block["nvme_requests"] = {{{"ranks", 1}, {"read_latency", -1}}};
  EXPECT_NE(refusal(document).find("calibration.nvme_requests[0].read_latency"), std::string::npos)
      << refusal(document);
}

}  // namespace
}  // namespace zerolens
