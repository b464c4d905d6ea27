// Expert parallelism (issue 21): DeepSpeed's MoE layers on a tiny mixture-of-experts model, every
// figure worked by hand. The model: 2 blocks of hidden 64 (4 heads of 16, RMSNorm, no biases,
// flash attention, no dropout), each a router [4, 64] and 4 SwiGLU experts of width 128 (top-2),
// an untied 256-token embedding and head. The job: 4 data-parallel ranks on 2 nodes of 2 GPUs,
// EP 2 (ranks {0, 1} and {2, 3}), so the ranks holding the same experts are {0, 2} and {1, 3};
// bf16, ZeRO-2, micro-batch 2 of 16 tokens (32 tokens a micro-step).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sim/config/deepspeed.hpp"
#include "sim/model/model.hpp"
#include "sim/model/presets.hpp"
#include "sim/predict/sweep.hpp"
#include "sim/schedule/comm.hpp"
#include "sim/timeline/timeline.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

TransformerShape tiny_moe() {
  TransformerShape s;
  s.family = "mixtral";
  s.layers = 2;
  s.hidden = 64;
  s.heads = 4;
  s.kv_heads = 4;
  s.ffn_hidden = 128;
  s.vocab = 256;
  s.max_positions = 128;
  s.learned_positions = false;
  s.tied_embeddings = false;
  s.qkv_bias = s.out_proj_bias = s.mlp_bias = false;
  s.norm = NormKind::RmsNorm;
  s.mlp = MlpKind::SwiGlu;
  s.dropout = 0;
  s.attention = AttentionImpl::Flash;
  s.moe = MoeShape{.experts = 4, .top_k = 2, .expert_ffn = 128};
  return s;
}

TrainingConfig moe_config(int ep, int stage = 2) {
  TrainingConfig config = testing::mixed_adam(stage, Precision::Bf16);
  config.batch.micro_batch_per_gpu = 2;
  config.seq_len = 16;
  config.expert_parallel.size = ep;
  return config;
}

// A100s (dgx-a100-80gb's rates) on nodes of 2 GPUs.
Plan moe_plan(const TrainingConfig& config, int dp = 4, int gpus_per_node = 2) {
  PlanRequest request;
  request.model = build_transformer("tiny-moe", tiny_moe());
  request.config = config;
  request.dp_size = dp;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), dp, gpus_per_node);
  return make_plan(request);
}

// sharded_moe.py _capacity for topkgating (capacity_factor x k): ceil(tokens / experts x factor x
// k), at least min_capacity, in float32.
TEST(ExpertParallel, CapacityIsDeepSpeeds) {
  MoeRouting r{.experts = 4, .local_experts = 2, .top_k = 2, .expert_parallel = 2, .hidden = 64};
  EXPECT_EQ(r.capacity(32), 16);  // 32 / 4 x 1.0 x 2
  EXPECT_EQ(r.rows(32), 64);      // the [4, 16, 64] buffer's rows, padding included
  EXPECT_EQ(r.exchange_elements(32), 4 * 16 * 64);
  r.capacity_factor = 1.25;
  EXPECT_EQ(r.capacity(32), 20);  // 8 x 2.5
  EXPECT_EQ(r.capacity(2), 4);    // ceil(0.5 x 2.5) = 2, below min_capacity 4
  // float32: 20 / 6 = 3.3333333 and 1.3 x 6 = 7.8 multiply to exactly 26.0f; in float64 the
  // product is 26.000000000000004, whose ceiling would be 27.
  MoeRouting fine{.experts = 6, .top_k = 6, .expert_parallel = 2, .capacity_factor = 1.3};
  EXPECT_EQ(fine.capacity(20), 26);
  // Without expert parallelism the blocks are dropless: top-k rows per token, no exchange.
  const MoeRouting dropless{.experts = 4, .local_experts = 4, .top_k = 2, .hidden = 64};
  EXPECT_EQ(dropless.rows(32), 64);
  EXPECT_EQ(dropless.exchange_elements(32), 0);
}

// What a rank holds. An expert is gate and up [128, 64] and down [64, 128]: 24,576 parameters;
// EP 2 leaves 2 of the 4 per block: 98,304 expert parameters on a rank, ZeRO-2-partitioned over
// the 2 ranks holding the same experts: 49,152. The rest (embedding 16,384; per block two norms of
// 64, q/k/v/o 4 x 4,096 and the router 256; the final norm 64; the head 16,384: 66,368) over all
// 4 ranks: 16,592. (stage_1_and_2.py _configure_moe_settings: the expert param group's
// partition_count is the expert-data-parallel group's size.)
TEST(ExpertParallel, ExpertPartitionsWorkedByHand) {
  const Plan plan = moe_plan(moe_config(2));
  const ParamLayout& layout = plan.schedule.layout;
  EXPECT_EQ(plan.rank_model.parameter_count(), 66'368 + 98'304);
  EXPECT_EQ(layout.expert_total, 98'304);
  EXPECT_EQ(layout.expert_dp_size, 2);
  EXPECT_EQ(layout.expert_flat_partition, 49'152);
  EXPECT_EQ(layout.flat_partition, 16'592);
  EXPECT_EQ(layout.owned, 16'592 + 49'152);
  Bytes params = 0, master = 0, states = 0;
  for (const MemEffect& e : plan.schedule.resident) {
    if (e.component == Component::ParamsFull) params += e.bytes;
    if (e.component == Component::MasterPartition) master += e.bytes;
    if (e.component == Component::OptimizerStatePartition) states += e.bytes;
  }
  EXPECT_EQ(params, 2 * (66'368 + 98'304));  // bf16, whole: the rank's 2 experts per block
  EXPECT_EQ(master, 4 * (16'592 + 49'152));
  EXPECT_EQ(states, 8 * (16'592 + 49'152));
  // Without EP every rank holds all 4 experts; ZeRO-2 over 4 ranks owns the same share.
  const Plan whole = moe_plan(moe_config(1));
  EXPECT_EQ(whole.schedule.layout.owned, (66'368 + 196'608) / 4);
  EXPECT_EQ(whole.schedule.layout.expert_dp_size, 0);
}

// The token exchanges: 32 tokens, capacity 16, a [4, 16, 64] bf16 buffer of 8,192 bytes, two
// all-to-alls in a block's forward and two in its backward: 8 a step of one micro-step (16 with
// two). Each rank sends half of it to its one EP peer on its node: 4,096 bytes over NVLink.
TEST(ExpertParallel, ExchangeBytesWorkedByHand) {
  for (const std::int64_t micro_steps : {1, 2}) {
    TrainingConfig config = moe_config(2);
    config.batch.gradient_accumulation_steps = micro_steps;
    const Plan plan = moe_plan(config);
    int exchanges = 0;
    for (const Op& op : plan.schedule.ops) {
      if (op.group != ProcessGroup::Expert) continue;
      ++exchanges;
      EXPECT_EQ(op.kind, OpKind::AllToAll);
      EXPECT_EQ(op.bytes, 8'192);
      EXPECT_EQ(op.group_size, 2);
      EXPECT_EQ(op.stream, Stream::ExpertParallel);
      const LinkTraffic traffic =
          collective_traffic(op.kind, op.bytes, op_group_shape(op, plan.schedule.context));
      EXPECT_EQ(traffic.intra_node, 4'096);
      EXPECT_EQ(traffic.inter_node, 0);
    }
    EXPECT_EQ(exchanges, 8 * micro_steps);
    const CollectiveTotals& all = plan.comm.expert_parallel[std::size_t(OpKind::AllToAll)];
    EXPECT_EQ(all.calls, 8 * micro_steps);
    EXPECT_EQ(all.bytes, 8 * micro_steps * 8'192);
    EXPECT_EQ(all.traffic_bytes, 8 * micro_steps * 4'096);
  }
  // A recompute runs the forward's two again: 12 with activation checkpointing.
  TrainingConfig checkpointed = moe_config(2);
  checkpointed.activation_checkpointing.enabled = true;
  const Plan recomputed = moe_plan(checkpointed);
  EXPECT_EQ(recomputed.comm.expert_parallel[std::size_t(OpKind::AllToAll)].calls, 12);
  // Backward's exchanges carry gradients, a recompute's the tokens again.
  int gradients = 0, tokens = 0;
  for (std::size_t i = 0; i < recomputed.schedule.ops.size(); ++i) {
    const Op& op = recomputed.schedule.ops[i];
    if (op.group != ProcessGroup::Expert || op.phase != Phase::Backward) continue;
    const std::string text = recomputed.schedule.describe(i, recomputed.rank_model);
    gradients += text.find("routed tokens' gradients") != std::string::npos ? 1 : 0;
    tokens += text.find("routed tokens with") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(gradients, 4);
  EXPECT_EQ(tokens, 4);
  // Without EP nothing is exchanged.
  EXPECT_EQ(moe_plan(moe_config(1)).comm.expert_parallel[std::size_t(OpKind::AllToAll)].calls, 0);
}

// gpt2-tiny-moe (sim/model/presets.cpp) plans at EP 2 x DP 4 (as `zerolens plan --model
// gpt2-tiny-moe --ep 2 --dp 4`): its one MoE block (block 1) exchanges a [4 experts, C, 64]
// buffer twice in forward and twice in backward. Micro-batch 2 x 16 = 32 tokens, top-2, capacity
// factor 1: C = ceil(32 / 4 x 1 x 2) = 16, 4 x 16 x 64 = 4,096 elements, 8,192 bytes in bf16.
// A rank holds 2 experts of 33,088 (fc_in 256 x 64 + 256, fc_out 64 x 256 + 64): 66,176, the
// rest of the model 224,192 - 4 x 33,088 = 91,840 (tests/sim/test_moe_models.cpp).
TEST(ExpertParallel, Gpt2TinyMoePlansItsExchanges) {
  PlanRequest request;
  TransformerShape shape = *model_from_preset("gpt2-tiny-moe").shape;
  request.model = build_transformer("gpt2-tiny-moe", shape);
  request.config = moe_config(2);
  request.dp_size = 4;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), 4, 2);
  const Plan plan = make_plan(request);
  EXPECT_EQ(plan.rank_model.parameter_count(), 91'840 + 66'176);
  EXPECT_EQ(plan.schedule.layout.expert_total, 66'176);
  int exchanges = 0;
  for (const Op& op : plan.schedule.ops) {
    if (op.group != ProcessGroup::Expert) continue;
    ++exchanges;
    EXPECT_EQ(op.kind, OpKind::AllToAll);
    EXPECT_EQ(op.bytes, 8'192);
  }
  EXPECT_EQ(exchanges, 4);
  EXPECT_EQ(plan.comm.expert_parallel[std::size_t(OpKind::AllToAll)].calls, 4);
}

// Gradients: the experts' over the ranks holding the same experts ({0, 2}: one on each node, so
// ZeRO-2's reduce-scatter crosses the network), the rest over all 4 ranks, never in one bucket.
// The step reduces the 98,304 expert gradients and the 66,368 others once each (bf16), then
// all-gathers each group's updated partitions.
TEST(ExpertParallel, ExpertGradientsReduceOverTheRanksHoldingTheSameExperts) {
  const Plan plan = moe_plan(moe_config(2));
  Bytes expert_reduced = 0, other_reduced = 0, expert_gathered = 0, other_gathered = 0;
  for (const Op& op : plan.schedule.ops) {
    const bool expert = op.group == ProcessGroup::ExpertData;
    if (op.kind == OpKind::ReduceScatter) (expert ? expert_reduced : other_reduced) += op.bytes;
    if (op.kind == OpKind::AllGather) (expert ? expert_gathered : other_gathered) += op.bytes;
    if (op.kind == OpKind::ReduceScatter || op.kind == OpKind::AllGather) {
      EXPECT_EQ(op.group_size, expert ? 2 : 4);
    }
    if (expert && op.kind == OpKind::ReduceScatter) {
      const GroupShape shape = op_group_shape(op, plan.schedule.context);
      EXPECT_EQ(shape.ranks_per_node, 1);
      EXPECT_EQ(shape.nodes, 2);
    }
  }
  EXPECT_EQ(expert_reduced, 2 * 98'304);
  EXPECT_EQ(other_reduced, 2 * 66'368);
  EXPECT_EQ(expert_gathered, 2 * 49'152 * 2);
  EXPECT_EQ(other_gathered, 2 * 16'592 * 4);
  for (std::size_t b = 0; b < plan.schedule.buckets.size(); ++b) {
    const auto tensors = plan.schedule.tensors_of(plan.schedule.buckets[b]);
    for (const auto t : tensors) {
      EXPECT_EQ(plan.schedule.layout.tensor_expert[std::size_t(t)],
                plan.schedule.layout.tensor_expert[std::size_t(tensors.front())])
          << "bucket " << b;
    }
  }
  // The expert group's gradient norm (_average_expert_grad_norms) beside the DP group's.
  int expert_norms = 0;
  for (const Op& op : plan.schedule.ops)
    expert_norms += op.kind == OpKind::GradNorm && op.group == ProcessGroup::ExpertData ? 1 : 0;
  EXPECT_EQ(expert_norms, 1);
}

// A MoE block's activations with EP (DeepSpeed's MOELayer), e = 2 bytes, T = 32 tokens, h = 64,
// 4 heads of 16, E = 4 experts, k = 2, f = 128, rows = E x C = 64:
//   per token, e x: the residual stream's 4h, Q and K (q + kv = 128), V (64), the attention output
//     (64), the combine's routed rows k h (128): 640 elements;
//   per token, fixed: flash's fp32 log-sum-exp 4 x 4 heads, the gate's fp32 input 4h, its fp32
//     gates 4E, bool mask E, masked gates 4E and their sum 4, the top-k indices 8k and the routes'
//     fp32 gates 4k: 16 + 256 + 9 x 4 + 4 + 12 x 2 = 336 bytes;
//   per row, e x: the received row h and the expert's 4f: 576 elements.
// Forward working: the fp32 product of the routed rows by their gates (4 k h a token) and the
// combine's received buffer with its padded copy (2h a row).
TEST(ExpertParallel, MoeBlockActivationsWorkedByHand) {
  const Model model = expert_parallel_shard(build_transformer("tiny-moe", tiny_moe()),
                                            ExpertParallelism{.size = 2});
  const ActivationBytes block = model.layers[1].activation_bytes(2, 16, 2);
  EXPECT_EQ(block.stored, 32 * (2 * 640 + 336) + 64 * 2 * 576);
  EXPECT_EQ(block.forward_working, 32 * 4 * 2 * 64 + 64 * 2 * 2 * 64);
  // A block's forward FLOPs: 2 x (attention 4 x 64 x 64 + router 64 x 4) per token, the expert
  // rows' 2 x 3 x 64 x 128 each, and flash's 4 q per token and position.
  const double flops =
      32.0 * 2 * (4 * 64 * 64 + 64 * 4) + 64.0 * 2 * 3 * 64 * 128 + 32.0 * 16 * 4 * 64;
  EXPECT_DOUBLE_EQ(model.layers[1].forward_flops(2, 16), flops);
}

// The timeline prices each exchange as an all-to-all over the EP group's links, and a block's
// next compute waits for its combine.
TEST(ExpertParallel, TimelinePricesTheExchanges) {
  const Plan plan = moe_plan(moe_config(2));
  const Timeline timeline = simulate_timeline(plan.schedule, plan.request.cluster, {});
  const auto& ops = plan.schedule.ops;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].group != ProcessGroup::Expert) continue;
    const double expected =
        collective_seconds(OpKind::AllToAll, 8'192, op_group_shape(ops[i], plan.schedule.context),
                           plan.request.cluster, CollectiveAlgorithm::Auto);
    EXPECT_GT(expected, 0);
    EXPECT_DOUBLE_EQ(timeline.ops[i].duration, expected);
    for (std::size_t j = i + 1; j < ops.size(); ++j) {
      if (ops[j].kind != OpKind::Forward && ops[j].kind != OpKind::Backward) continue;
      EXPECT_GE(timeline.ops[j].start, timeline.ops[i].end());
      break;
    }
  }
}

// The sweep's parallel search takes every EP size dividing the experts (1, 2, 4) and no TP (not
// modelled for MoE layers); stage 3 only without EP (DeepSpeed's MoE layers run at 0-2).
TEST(ExpertParallel, SweepSearchesExpertParallelSizes) {
  PlanRequest base;
  base.model = build_transformer("tiny-moe", tiny_moe());
  base.config = moe_config(1);
  base.dp_size = 4;
  base.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), 4, 2);
  SweepSpace space;
  space.stages = {2, 3};
  space.optimizer_devices = {OffloadDevice::None};
  space.param_devices = {OffloadDevice::None};
  space.checkpointing = {false};
  space.micro_batches = {2};
  add_parallel_search(base, space);
  EXPECT_EQ(space.expert_parallel, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(space.tensor_parallel, (std::vector<int>{1}));
  space.pipeline_parallel = {1};
  space.virtual_stages = {1};
  space.zeropp = {};
  std::vector<std::string> notes;
  const SweepEnumeration enumeration = enumerate_sweep(base, space, notes);
  std::vector<std::pair<int, int>> points;  // (ep, stage)
  for (const SweepPoint& point : enumeration.points)
    points.emplace_back(point.layout.expert, point.stage);
  EXPECT_EQ(points, (std::vector<std::pair<int, int>>{{1, 2}, {1, 3}, {2, 2}, {4, 2}}));
  const SweepResult ep4 = evaluate_sweep_point(base, enumeration.points.back(), {});
  EXPECT_TRUE(ep4.fits);
}

// Refused where DeepSpeed refuses, each naming its key or flag.
TEST(ExpertParallel, RefusalsNameTheKey) {
  const auto refusal = [](const TrainingConfig& config, int dp = 4) -> std::string {
    try {
      moe_plan(config, dp);
    } catch (const InputError& error) {
      return error.where();
    }
    return "accepted";
  };
  EXPECT_EQ(refusal(moe_config(2, 3)), "moe.ep_size");  // native MoE is not supported at stage 3
  EXPECT_EQ(refusal(moe_config(3)), "--ep");            // 4 experts do not split over 3 ranks
  EXPECT_EQ(refusal(moe_config(4), 2), "moe.ep_size");  // 4 does not divide 2 DP ranks
  TrainingConfig fsdp = moe_config(2, 3);
  fsdp.framework = Framework::Fsdp2;
  EXPECT_EQ(refusal(fsdp), "moe.ep_size");
  PlanRequest dense;
  dense.model = testing::small_transformer(2, 64);
  dense.config = moe_config(2);
  dense.dp_size = 4;
  dense.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), 4, 2);
  EXPECT_THROW(make_plan(dense), InputError);
  TrainingConfig tp = moe_config(1);
  tp.tensor_parallel.size = 2;
  EXPECT_EQ(refusal(tp), "--tp");
}

// The "moe" block of a config (zerolens's keys for DeepSpeed's MoE layer arguments).
TEST(ExpertParallel, ConfigBlockIsRead) {
  Diagnostics diagnostics;
  const TrainingConfig config =
      parse_deepspeed_config(nlohmann::json::parse(R"({"train_micro_batch_size_per_gpu": 1,
                                "moe": {"ep_size": 4, "capacity_factor": 1.25, "min_capacity": 2}})"),
                             diagnostics);
  EXPECT_EQ(config.expert_parallel.size, 4);
  EXPECT_DOUBLE_EQ(config.expert_parallel.capacity_factor, 1.25);
  EXPECT_EQ(config.expert_parallel.min_capacity, 2);
  EXPECT_TRUE(diagnostics.warnings.empty());
}

}  // namespace
}  // namespace zerolens
