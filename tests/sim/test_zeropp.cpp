// ZeRO++ (issue 20): hpZ, qwZ and qgZ as DeepSpeed 0.19.8 runs them, worked by hand, and the
// ZeRO++ paper's claim (Wang et al. 2023, section 1 and table 1): cross-node traffic per step falls
// from 3M (ZeRO-3: forward and backward all-gathers and the gradients' reduce-scatter, M each) to
// 0.75M (qwZ's int8 forward gather 0.5M, hpZ's backward gather within the node 0, qgZ's int4
// cross-node hop 0.25M), plus the quantization scales.
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "sim/config/deepspeed.hpp"
#include "sim/config/deepspeed_json.hpp"
#include "sim/schedule/comm.hpp"
#include "sim/schedule/memory_replay.hpp"
#include "sim/schedule/zeropp.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

// CUDAQuantizer.quantize's group count: the least count >= n / 8000 giving groups of a multiple of
// 8 elements, worked by hand.
TEST(ZeroPlusPlus, QuantizerGroupsAreDeepSpeedsAdaptiveGrouping) {
  EXPECT_EQ(qwz_scale_groups(65536), 16);           // >= 9 dividing 8192: 16 (groups of 4096)
  EXPECT_EQ(qwz_scale_groups(131072), 32);          // >= 17 dividing 16384: 32
  EXPECT_EQ(qwz_scale_groups(1 << 24), 4096);       // >= 2098 dividing 2^21: 4096
  EXPECT_EQ(qwz_scale_groups(16000), 2);            // >= 2 dividing 2000: 2 (groups of 8000)
  EXPECT_EQ(qwz_scale_groups(8 * 7919), 7919);      // 7919 is prime: groups of 8
  EXPECT_EQ(qwz_scale_groups(8 * 3 * 1009), 1009);  // >= 4 dividing 3027 = 3 x 1009: 1009
  EXPECT_EQ(qwz_scale_groups(12), 1);               // not a multiple of 8: ceil(12 / 8000)
  EXPECT_EQ(qwz_scale_groups(0), 0);
  EXPECT_EQ(qwz_send_bytes(65536), 65536 + 4 * 16);
  // A 10^12-element partition whose eighth is prime-free of small factors still answers.
  EXPECT_GE(qwz_scale_groups(Elements(8) * 999'999'999'989), 1);
}

// One [1024, 3072] gradient over 16 ranks, 8 per node: int4 is half a byte per element, scales
// are fp32, max(rows, cols, world) = 3072 groups in the node's hop, 3072 / 8 = 384 across nodes.
TEST(ZeroPlusPlus, QuantizedGradientHopsWorkedByHand) {
  const QgzTensor q = qgz_tensor({1024, 3072}, 16, 8);
  ASSERT_TRUE(q.quantized);
  const Elements elements = 1024 * 3072;
  EXPECT_EQ(q.node_hop, elements / 2 + 4 * 3072);
  EXPECT_EQ(q.cross_node_hop, elements / 8 / 2 + 4 * 384);
  EXPECT_EQ(q.transient, 2 * q.node_hop + 2 * q.cross_node_hop + 2 * (elements / 8));
  EXPECT_FALSE(qgz_tensor({3072}, 16, 8).quantized);  // 1-D: reduce-scattered
  EXPECT_FALSE(qgz_tensor({7, 6}, 16, 8).quantized);  // 42 is not a multiple of 2 x 16
  EXPECT_TRUE(qgz_tensor({4, 8}, 16, 8).quantized);   // 32 is
}

// Four layers of one [1024, 1024] weight each: every tensor of the two-hop reduction quantizes,
// nothing persists, nothing is prefetched and every use is gathered anew, so the step's gathers
// and its one reduction are exactly the paper's three collectives.
Model square_layers() {
  Model model;
  model.name = "four-squares";
  for (int i = 0; i < 4; ++i) {
    Layer layer;
    layer.name = "square" + std::to_string(i);
    layer.params.push_back({.name = "weight", .shape = {1024, 1024}});
    model.layers.push_back(layer);
  }
  return model;
}

Plan plan_square(bool zeropp) {
  PlanRequest request;
  request.model = square_layers();
  TrainingConfig& config = request.config;
  config.zero.stage = 3;
  config.precision.precision = Precision::Bf16;
  config.zero.stage3_param_persistence_threshold = 0;
  config.zero.stage3_max_reuse_distance = 0;
  config.zero.stage3_prefetch_bucket_size = 0;
  config.zero.reduce_bucket_size = 4 << 20;  // the four gradients in one bucket
  config.batch.micro_batch_per_gpu = 1;
  config.seq_len = 8;
  if (zeropp) {
    config.zero.hpz_partition_size = 8;
    config.zero.quantized_weights = true;
    config.zero.quantized_gradients = true;
  }
  request.dp_size = 16;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), 16, 0);  // 2 nodes x 8
  return make_plan(request);
}

TEST(ZeroPlusPlus, CrossNodeTrafficFallsFromThreeMToThreeQuartersM) {
  const Elements weight = 1024 * 1024;
  // M: a rank's cross-node bytes for one bf16 collective of the whole model, hierarchically
  // (n - 1) / n x message / ranks per node = 1/2 x (4 x 2 x weight) / 8.
  const Bytes m = 4 * 2 * weight / 2 / 8;
  const Plan zero3 = plan_square(false);
  EXPECT_EQ(zero3.comm.links.inter_node, 3 * m);

  const Plan zeropp = plan_square(true);
  // qwZ forward: each rank sends its 65,536-element partition in int8 and 16 scales; 4 gathers.
  const Bytes forward = 4 * (16 * (65536 + 4 * 16)) / 2 / 8;
  // qgZ: per tensor weight / 8 int4 elements and 1024 / 8 scales leave the node, half to the other.
  const Bytes gradients = 4 * (weight / 8 / 2 + 4 * 128) / 2;
  EXPECT_EQ(zeropp.comm.links.inter_node, forward + gradients);
  EXPECT_EQ(forward, m / 2 + 256);     // 0.5M and the scales
  EXPECT_EQ(gradients, m / 4 + 1024);  // 0.25M and the scales
  EXPECT_NEAR(double(zeropp.comm.links.inter_node) / double(zero3.comm.links.inter_node), 0.25,
              0.001);

  // Where each collective ran: forward gathers over the 16 ranks, backward ones within the hpZ
  // group of 8 (intra-node), the gradients in two all-to-all hops and no reduce-scatter.
  EXPECT_EQ(zeropp.comm.of(OpKind::AllGather).calls, 4);
  EXPECT_EQ(zeropp.comm.secondary[std::size_t(OpKind::AllGather)].calls, 4);
  EXPECT_EQ(zeropp.comm.secondary[std::size_t(OpKind::AllGather)].bytes, 4 * 8 * (131072 + 4 * 32));
  EXPECT_EQ(zeropp.comm.node_local[std::size_t(OpKind::AllToAll)].bytes,
            4 * (weight / 2 + 4 * 1024));
  EXPECT_EQ(zeropp.comm.cross_node[std::size_t(OpKind::AllToAll)].calls, 1);
  EXPECT_EQ(zeropp.comm.of(OpKind::ReduceScatter).calls, 0);
}

// hpZ holds a secondary copy of each layer it released in forward: weight / 8 bf16 elements per
// layer, all four at once from the last forward release until the update frees them.
TEST(ZeroPlusPlus, SecondaryPartitionLivesFromForwardToTheUpdate) {
  const Plan plan = plan_square(true);
  const MemoryTimeline replay = replay_memory(plan.schedule, ReplayDetail::Components);
  const auto gpu = std::size_t(Device::Gpu);
  const auto secondary = std::size_t(Component::ParamsSecondary);
  Bytes highest = 0;
  for (const auto& state : replay.states) highest = std::max(highest, state[gpu][secondary]);
  EXPECT_EQ(highest, 4 * (1024 * 1024 / 8) * 2);
  EXPECT_EQ(replay.states.front()[gpu][secondary], 0);
  EXPECT_EQ(replay.states.back()[gpu][secondary], 0);
  // The optimizer step is where they go.
  const auto& ops = plan.schedule.ops;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != OpKind::OptimizerStep) continue;
    EXPECT_EQ(replay.states[i][gpu][secondary], highest);
    EXPECT_EQ(replay.states[i + 1][gpu][secondary], 0);
  }
  // Initialisation partitions every parameter and makes its secondary copy with it.
  const Plan plain = plan_square(false);
  EXPECT_EQ(plan.gpu.initialization_allocated_partitioned,
            plain.gpu.initialization_allocated_partitioned + highest);
}

// qwZ's gathered int8, scales and 16-bit dequantization live beside the gathered layer while the
// handle waits: 3 bytes per element and the scales more than the plain gather at that moment.
TEST(ZeroPlusPlus, QuantizedGatherHoldsItsInt8AndDequantizedBuffers) {
  const Plan plain = plan_square(false);
  PlanRequest request = plain.request;
  request.config.zero.quantized_weights = true;
  const Plan quantized = make_plan(request);
  const MemoryTimeline a = replay_memory(plain.schedule, ReplayDetail::PerOp);
  const MemoryTimeline b = replay_memory(quantized.schedule, ReplayDetail::PerOp);
  ASSERT_EQ(plain.schedule.ops.size(), quantized.schedule.ops.size());
  const auto gpu = std::size_t(Device::Gpu);
  for (std::size_t i = 0; i < plain.schedule.ops.size(); ++i) {
    if (plain.schedule.ops[i].kind != OpKind::AllGather) continue;
    EXPECT_EQ(b.after_op[i][gpu], a.after_op[i][gpu]) << i;
    const Bytes extra = 16 * (65536 + 4 * 16) + 2 * 1024 * 1024;
    EXPECT_EQ(b.high_during_op[i][gpu], a.after_op[i][gpu] + extra) << i;
  }
}

// qwZ with TP 2 x DP 4 on 2 nodes of 4 GPUs: each rank fetches its TP shard over the DP group of
// its TP coordinate (DeepSpeed gathers over the parameter's data_parallel_group). Worked on paper
// for block h.0 of the 2-block model of hidden 8, 2 heads, MLP 32: a TP rank holds
//   ln_1 16 + qkv [12, 8] 96 + 12 + attention out [8, 4] 32 + 8 + ln_2 16 + fc_in [16, 8] 128 + 16
//   + fc_out [8, 16] 128 + 8 = 460 parameters,
// a DP partition of 460 / 4 = 115; 115 is not a multiple of 8, so ceil(115 / 8000) = 1 fp32 scale:
// each rank sends 115 + 4 = 119 bytes and the fetch gathers 4 x 119 = 476 bytes (bf16: 920). The
// DP group's ranks are t = 2 apart, so a node holds 2 of its 4: a ring all-gather of S = 476
// sends S (g - 1) / g = 238 bytes within the node and S (m - 1) / (m g) = 119 across (g = 2 per
// node, m = 2 nodes).
TEST(ZeroPlusPlus, QuantizedWeightsWithTensorParallelismWorkedByHand) {
  PlanRequest request;
  request.model = build_transformer("tiny", testing::hand_worked_shape(2));
  TrainingConfig& config = request.config;
  config.zero.stage = 3;
  config.precision.precision = Precision::Bf16;
  config.zero.stage3_param_persistence_threshold = 0;
  config.zero.stage3_max_reuse_distance = 0;
  config.zero.stage3_prefetch_bucket_size = 0;
  config.batch.micro_batch_per_gpu = 1;
  config.seq_len = 8;
  config.tensor_parallel.size = 2;
  request.dp_size = 4;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), 8, 4);  // 2 nodes x 4
  const Plan plain = make_plan(request);
  request.config.zero.quantized_weights = true;
  const Plan quantized = make_plan(request);
  const auto h0 =
      std::find_if(quantized.rank_model.layers.begin(), quantized.rank_model.layers.end(),
                   [](const Layer& l) { return l.name == "h.0"; });
  ASSERT_NE(h0, quantized.rank_model.layers.end());
  EXPECT_EQ(h0->numel(), 460);
  const int layer = int(h0 - quantized.rank_model.layers.begin());
  ASSERT_EQ(plain.schedule.ops.size(), quantized.schedule.ops.size());
  int fetches = 0;
  for (std::size_t i = 0; i < quantized.schedule.ops.size(); ++i) {
    const Op& op = quantized.schedule.ops[i];
    if (op.kind != OpKind::AllGather || op.layer != layer) continue;
    ++fetches;
    EXPECT_EQ(op.group, ProcessGroup::Data);
    EXPECT_EQ(op.group_size, 4);
    EXPECT_EQ(op.bytes, 476);
    EXPECT_EQ(plain.schedule.ops[i].bytes, 920);
    const LinkTraffic traffic =
        collective_traffic(op.kind, op.bytes, op_group_shape(op, quantized.schedule.context));
    EXPECT_EQ(traffic.intra_node, 238);
    EXPECT_EQ(traffic.inter_node, 119);
  }
  EXPECT_EQ(fetches, 2);  // forward and backward
  // hpZ and qgZ keep their refusal with TP: DeepSpeed builds their groups over the world's ranks.
  for (const bool hpz : {true, false}) {
    PlanRequest refused = request;
    refused.config.zero.hpz_partition_size = hpz ? 2 : 1;
    refused.config.zero.quantized_gradients = !hpz;
    try {
      make_plan(refused);
      ADD_FAILURE() << (hpz ? "hpZ" : "qgZ") << " with TP was planned";
    } catch (const InputError& e) {
      EXPECT_EQ(e.where(), hpz ? "zero_optimization.zero_hpz_partition_size"
                               : "zero_optimization.zero_quantized_gradients");
      EXPECT_NE(std::string(e.what()).find("consecutive ranks of the world"), std::string::npos);
    }
  }
}

// DeepSpeed's keys are read at stage 3, ignored with a warning below it (as DeepSpeed does), and
// written back; what zerolens cannot plan is refused by key.
TEST(ZeroPlusPlus, DeepSpeedKeysAreReadWarnedAndRefusedByKey) {
  const auto read = [](const std::string& text, Diagnostics& diagnostics) {
    return parse_deepspeed_config(nlohmann::json::parse(text), diagnostics);
  };
  Diagnostics diagnostics;
  const TrainingConfig on = read(R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8,
      "zero_quantized_weights": true, "zero_quantized_gradients": true}})",
                                 diagnostics);
  EXPECT_EQ(on.zero.hpz_partition_size, 8);
  EXPECT_TRUE(on.zero.quantized_weights && on.zero.quantized_gradients);
  EXPECT_TRUE(diagnostics.warnings.empty());
  Diagnostics again;  // a config zerolens writes (a trace's, an export) reads back the same
  const TrainingConfig back = parse_deepspeed_config(to_deepspeed_json(on), again);
  EXPECT_EQ(back.zero.hpz_partition_size, 8);
  EXPECT_TRUE(back.zero.quantized_weights && back.zero.quantized_gradients);
  Diagnostics below;
  const TrainingConfig off =
      read(R"({"zero_optimization": {"stage": 2, "zero_quantized_gradients": true}})", below);
  EXPECT_FALSE(off.zero.zeropp());
  ASSERT_EQ(below.warnings.size(), 1u);
  EXPECT_EQ(below.warnings[0].rfind("zero_optimization.zero_quantized_gradients: ", 0), 0u)
      << below.warnings[0];

  PlanRequest request = plan_square(true).request;
  request.config.zero.hpz_partition_size = 3;  // 16 ranks do not split into groups of 3
  try {
    make_plan(request);
    ADD_FAILURE() << "hpZ groups of 3 over 16 ranks were planned";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "zero_optimization.zero_hpz_partition_size");
  }
  request = plan_square(true).request;
  request.config.zero.offload_param.device = OffloadDevice::Cpu;
  EXPECT_THROW(make_plan(request), InputError);
}

}  // namespace
}  // namespace zerolens
