// Tensor and sequence parallelism (issue 20): one rank's shard of a transformer, its activations
// against Korthikanti et al. 2022's formulas, the TP group's collectives worked by hand, and the
// placement that decides which link each group's traffic crosses.
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "sim/config/deepspeed_json.hpp"
#include "sim/config/overrides.hpp"
#include "sim/model/layers_json.hpp"
#include "sim/schedule/comm.hpp"
#include "sim/timeline/timeline.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

TransformerShape tiny_shape() { return testing::hand_worked_shape(2); }

Model tiny(int tp, bool sp = false) {
  return build_transformer("tiny", tiny_shape(),
                           TensorParallelism{.size = tp, .sequence_parallel = sp});
}

const TensorSpec& tensor(const Model& model, const std::string& name) {
  for (const auto& layer : model.layers) {
    for (const auto& spec : layer.params) {
      if (spec.name == name) return spec;
    }
  }
  throw std::out_of_range(name);
}

// Worked by hand. Without TP a block holds ln_1 16, q/k/v 3 x (64 + 8), o 64 + 8, ln_2 16,
// fc_in 256 + 32, fc_out 256 + 8 = 872. With TP 2: q/k/v 3 x (32 + 4), o 32 + 8 (its bias whole),
// fc_in 128 + 16, fc_out 128 + 8 (bias whole), norms whole = 460. The vocabulary is padded to a
// multiple of 128 x 2 = 256: 128 rows of 8 per rank; wpe (16 x 8) and ln_f (16) are whole.
TEST(TensorParallel, ShardHoldsTheSplitsWorkedByHand) {
  const Model whole = tiny(1);
  EXPECT_EQ(whole.layers[1].numel(), 872);
  EXPECT_EQ(whole.parameter_count(), 100 * 8 + 16 * 8 + 2 * 872 + 16);

  const Model shard = tiny(2);
  EXPECT_EQ(shard.layers[1].numel(), 460);
  EXPECT_EQ(shard.parameter_count(), 128 * 8 + 16 * 8 + 2 * 460 + 16);
  EXPECT_EQ(tensor(shard, "wte.weight").shape, (std::vector<std::int64_t>{128, 8}));
  EXPECT_EQ(tensor(shard, "wte.weight").split, TensorSplit::Vocab);
  EXPECT_EQ(tensor(shard, "wpe.weight").split, TensorSplit::Replicated);
  EXPECT_EQ(tensor(shard, "h.0.attn.q_proj.weight").shape, (std::vector<std::int64_t>{4, 8}));
  EXPECT_EQ(tensor(shard, "h.0.attn.q_proj.bias").split, TensorSplit::Column);
  EXPECT_EQ(tensor(shard, "h.0.attn.o_proj.weight").shape, (std::vector<std::int64_t>{8, 4}));
  EXPECT_EQ(tensor(shard, "h.0.attn.o_proj.bias").shape, (std::vector<std::int64_t>{8}));
  EXPECT_EQ(tensor(shard, "h.0.mlp.fc_out.weight").split, TensorSplit::Row);
  // Two shards hold every split tensor once and the replicated ones twice; the padding rows
  // (256 - 100) x 8 are new.
  const Elements replicated = 16 * 8 + 2 * (16 + 16 + 8 + 8) + 16;
  EXPECT_EQ(2 * shard.parameter_count() - replicated, whole.parameter_count() + (256 - 100) * 8);
  // FLOPs split: 2 x (3 h^2 + h^2 + 2 h f) / t per token, attention 4 h / t per position.
  EXPECT_DOUBLE_EQ(shard.layers[1].matmul_flops_per_token, 2.0 * (4 * 64 + 2 * 8 * 32) / 2);
  EXPECT_DOUBLE_EQ(shard.layers[1].attention_flops_per_token_position, 4.0 * 8 / 2);
}

// The LM head's backward under SP gathers its sequence-split input again for the weight gradient
// (Megatron's column-parallel backward), beside the whole input gradient before its
// reduce-scatter: h = 8 more elements per token than without SP.
TEST(TensorParallel, SequenceParallelHeadGathersItsInputAgainInBackward) {
  const auto head_backward = [](bool sp) {
    return tiny(2, sp).layers.back().activation_bytes(2, 16, 2).backward_working;
  };
  // 32 tokens x (input gradient 8 x 2 + fp32 logit gradient 128 x 4 + its bf16 cast 128 x 2).
  EXPECT_EQ(head_backward(false), 32 * (8 * 2 + 128 * 4 + 128 * 2));
  EXPECT_EQ(head_backward(true), 32 * (2 * 8 * 2 + 128 * 4 + 128 * 2));
}

// Korthikanti et al. 2022, Sec. 4.2 (16-bit activations, 1-byte dropout masks, eager attention):
// per block, s b h (10 + 24/t + 5 a s / (h t)) bytes with tensor parallelism,
// s b h (34/t + 5 a s / (h t)) with sequence parallelism as well.
TEST(TensorParallel, BlockActivationsFollowKorthikanti) {
  TransformerShape shape = tiny_shape();
  shape.hidden = 1024;
  shape.heads = 16;
  shape.kv_heads = 16;
  shape.ffn_hidden = 4096;
  shape.vocab = 4096;
  const double s = 512, b = 2, h = 1024, a = 16;
  for (const int t : {1, 2, 4, 8}) {
    for (const bool sp : {false, true}) {
      const Model model = build_transformer("m", shape, {.size = t, .sequence_parallel = sp});
      const double per_layer = sp && t > 1 ? 34.0 / t : 10 + 24.0 / t;
      const double expected = s * b * h * (per_layer + 5 * a * s / (h * t));
      EXPECT_EQ(model.layers[1].activation_bytes(2, 512, 2).stored, Bytes(expected))
          << "t " << t << " sp " << sp;
      // A checkpoint keeps the block input: 2 s b h bytes, a t-th of it along the sequence.
      EXPECT_EQ(model.layers[1].activation_bytes(2, 512, 2).checkpoint,
                Bytes(2 * s * b * h / (sp && t > 1 ? t : 1)));
    }
  }
}

TrainingConfig tp_config(int tp, bool sp, int stage = 0) {
  TrainingConfig config;
  config.zero.stage = stage;
  config.precision.precision = Precision::Bf16;
  config.batch.micro_batch_per_gpu = 2;
  config.seq_len = 16;
  config.tensor_parallel = {.size = tp, .sequence_parallel = sp};
  return config;
}

Plan plan_tp(const TrainingConfig& config, int dp, int gpus_per_node = 8) {
  PlanRequest request;
  request.model = tiny(1);
  request.config = config;
  request.dp_size = dp;
  Cluster cluster = testing::test_cluster(gpus_per_node);
  cluster.nodes = int(ceil_div(std::int64_t(dp) * config.tensor_parallel.size, gpus_per_node));
  request.cluster = cluster;
  return make_plan(request);
}

Plan plan_on_preset(const TrainingConfig& config, int dp) {
  PlanRequest request;
  request.model = tiny(1);
  request.config = config;
  request.dp_size = dp;
  request.cluster =
      with_ranks(cluster_from_preset("dgx-a100-80gb"), dp * config.tensor_parallel.size, 0);
  return make_plan(request);
}

// TP 2 x DP 2, micro-batch 2 x 16 tokens in bf16: a residual-stream message is 2 x 16 x 8 x 2 =
// 512 bytes, a loss statistic 2 x 16 x 4 = 128 bytes. Without SP: forward all-reduces the
// embedding (1), each block's attention and MLP outputs (4) and the loss's max, target logit and
// sum (3); backward each block's two input gradients (4) and the LM head's input gradient (1).
TEST(TensorParallel, CollectivesWorkedByHand) {
  const Plan plan = plan_tp(tp_config(2, false), 2);
  const auto& tp = plan.comm.tensor_parallel;
  EXPECT_EQ(tp[std::size_t(OpKind::AllReduce)].calls, 13);
  EXPECT_EQ(tp[std::size_t(OpKind::AllReduce)].bytes, 10 * 512 + 3 * 128);
  // A 2-rank all-reduce sends 2 (n - 1) / n = 1 x the message.
  EXPECT_EQ(tp[std::size_t(OpKind::AllReduce)].traffic_bytes, 10 * 512 + 3 * 128);
  EXPECT_EQ(tp[std::size_t(OpKind::AllGather)].calls, 0);
  // Stage 0 over the DP group all-reduces this rank's gradients: the shard's 2088 bf16 elements.
  EXPECT_EQ(plan.rank_model.parameter_count(), 2088);
  EXPECT_EQ(plan.comm.of(OpKind::AllReduce).bytes, 2088 * 2);
  // The gradient norm's fp32 sum of squares is all-reduced over the TP group too (DeepSpeed's
  // _model_parallel_all_reduce): 4 bytes, 2 (n - 1) / n = 1 x that sent; no overflow check in bf16.
  EXPECT_EQ(tp[std::size_t(OpKind::GradNorm)].calls, 1);
  EXPECT_EQ(tp[std::size_t(OpKind::GradNorm)].bytes, 4);
  EXPECT_EQ(tp[std::size_t(OpKind::OverflowCheck)].calls, 0);
  // Both groups stay in the 8-GPU node.
  EXPECT_EQ(plan.comm.links.inter_node, 0);
  EXPECT_EQ(plan.comm.links.intra_node, 10 * 512 + 3 * 128 + 4 + 2088 * 2);

  // Checkpointing recomputes every block's forward, its two all-reduces included.
  TrainingConfig checkpointed = tp_config(2, false);
  checkpointed.activation_checkpointing.enabled = true;
  EXPECT_EQ(plan_tp(checkpointed, 2).comm.tensor_parallel[std::size_t(OpKind::AllReduce)].calls,
            17);
}

// DeepSpeed's partition_activations with TP 2 (checkpointing.py): a block's checkpoint, its input
// of 2 x 16 tokens x h 8 bf16 = 512 bytes, is kept half per rank (256; with SP the input is split
// along the sequence already, and partitioned again: 128), and each recompute first all-gathers the
// whole 512 bytes in the TP group: 2 blocks, 2 more all-gathers sending (n - 1) / n = 256 each.
TEST(TensorParallel, PartitionedActivationCheckpointsWorkedByHand) {
  TrainingConfig config = tp_config(2, false);
  config.activation_checkpointing.enabled = true;
  const Plan whole = plan_tp(config, 2);
  config.activation_checkpointing.partition_activations = true;
  const Plan partitioned = plan_tp(config, 2);
  const auto checkpoint = [](const Plan& plan) {
    return plan.rank_model.layers[1].activation_bytes(2, 16, 2).checkpoint;
  };
  EXPECT_EQ(checkpoint(whole), 512);
  EXPECT_EQ(checkpoint(partitioned), 256);
  const auto& gathers = partitioned.comm.tensor_parallel[std::size_t(OpKind::AllGather)];
  EXPECT_EQ(whole.comm.tensor_parallel[std::size_t(OpKind::AllGather)].calls, 0);
  EXPECT_EQ(gathers.calls, 2);
  EXPECT_EQ(gathers.bytes, 2 * 512);
  EXPECT_EQ(gathers.traffic_bytes, 2 * 256);
  // The recompute reads the gathered input in place of the part: at the peak the checkpoints hold
  // half as much, the rest of the step's memory unchanged.
  const auto gpu = std::size_t(Device::Gpu), ckpt = std::size_t(Component::ActivationCheckpoints);
  EXPECT_LE(partitioned.devices[gpu].peak, whole.devices[gpu].peak);
  EXPECT_EQ(partitioned.devices[gpu].components[ckpt] * 2, whole.devices[gpu].components[ckpt]);
  config.tensor_parallel.sequence_parallel = true;
  EXPECT_EQ(checkpoint(plan_tp(config, 2)), 128);
  // Without TP there is nothing to partition over (and the plan says so).
  config.tensor_parallel = {};
  const Plan alone = plan_tp(config, 2);
  EXPECT_EQ(checkpoint(alone), 512);
  EXPECT_NE(alone.notes.front().find("partition_activations"), std::string::npos);
}

// With SP each block's forward gathers (2) and reduce-scatters (2); its backward gathers the
// output gradients (2), gathers the saved inputs again (2) and reduce-scatters the input gradients
// (2). The embedding reduce-scatters (gathers in backward); the LM head gathers its input, and in
// backward gathers it again and reduce-scatters its gradient. Once per step the replicated
// parameters' gradients (norms 4 x 16 + 16, row biases 4 x 8 = 112 bf16 elements) are all-reduced.
TEST(TensorParallel, SequenceParallelCollectivesWorkedByHand) {
  const Plan plan = plan_tp(tp_config(2, true), 2);
  const auto& tp = plan.comm.tensor_parallel;
  EXPECT_EQ(tp[std::size_t(OpKind::AllGather)].calls, 2 * 6 + 1 + 2);
  EXPECT_EQ(tp[std::size_t(OpKind::AllGather)].bytes, 15 * 512);
  EXPECT_EQ(tp[std::size_t(OpKind::ReduceScatter)].calls, 2 * 4 + 1 + 1);
  EXPECT_EQ(tp[std::size_t(OpKind::ReduceScatter)].bytes, 10 * 512);
  EXPECT_EQ(tp[std::size_t(OpKind::AllReduce)].calls, 3 + 1);
  EXPECT_EQ(tp[std::size_t(OpKind::AllReduce)].bytes, 3 * 128 + 112 * 2);
  // A 2-rank all-gather or reduce-scatter sends half the message.
  EXPECT_EQ(tp[std::size_t(OpKind::AllGather)].traffic_bytes, 15 * 256);
}

// TP innermost: with TP 2 on 8-GPU nodes a DP group of 8 has 4 ranks on each of 2 nodes. Its
// stage-0 all-reduce of S bytes sends 2 x 3/4 S inside a node and 2 x 1/8 S across.
TEST(TensorParallel, DataParallelGroupsAreStridedAcrossNodes) {
  const Plan plan = plan_tp(tp_config(2, false), 8);
  const Bytes message = plan.comm.of(OpKind::AllReduce).bytes;
  EXPECT_EQ(message, 2088 * 2);
  EXPECT_EQ(plan.schedule.context.data_parallel_ranks_per_node(), 4);
  EXPECT_EQ(plan.schedule.context.ranks_per_node(), 8);
  EXPECT_EQ(plan.comm.links.inter_node, message / 4);
  const Bytes tp_traffic = 10 * 512 + 3 * 128 + 4;  // activations, loss statistics, norm
  EXPECT_EQ(plan.comm.links.intra_node, tp_traffic + message * 3 / 2);
}

// The next layer waits for the TP collectives of the one before: the timeline runs them between.
TEST(TensorParallel, TimelineWaitsForTheGroupsCollectives) {
  const Plan plan = plan_on_preset(tp_config(2, false), 2);
  const Timeline timeline = simulate_timeline(plan.schedule, plan.request.cluster, {});
  const auto& ops = plan.schedule.ops;
  double last_tp_end = 0;
  int tp_ops = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].group == ProcessGroup::Tensor) {
      EXPECT_EQ(ops[i].stream, Stream::TensorParallel);
      EXPECT_GT(timeline.ops[i].duration, 0);
      last_tp_end = std::max(last_tp_end, timeline.ops[i].end());
      ++tp_ops;
    } else if (ops[i].stream == Stream::Compute && ops[i].kind != OpKind::OptimizerStep) {
      EXPECT_GE(timeline.ops[i].start, last_tp_end) << i;
    }
  }
  EXPECT_EQ(tp_ops, 13 + 1);  // the layers' 13 and the gradient norm's
}

// fp16 at stage 1 over TP 2 x DP 2: the overflow flag (1 byte) and the norm (4 bytes) are
// all-reduced over the DP group and then over the TP group, in that order, before the update;
// at stage 0 (whole gradients, no DP collective for either) over the TP group alone.
TEST(TensorParallel, OverflowFlagAndNormAreReducedOverTheGroup) {
  const auto scalars = [](const Plan& plan) {
    std::vector<std::pair<OpKind, ProcessGroup>> found;
    for (const Op& op : plan.schedule.ops) {
      if (op.kind == OpKind::OverflowCheck || op.kind == OpKind::GradNorm)
        found.emplace_back(op.kind, op.group);
    }
    return found;
  };
  TrainingConfig config = tp_config(2, false, 1);
  config.precision.precision = Precision::Fp16;
  using P = std::pair<OpKind, ProcessGroup>;
  const Plan stage1 = plan_tp(config, 2);
  EXPECT_EQ(scalars(stage1), (std::vector<P>{{OpKind::OverflowCheck, ProcessGroup::Data},
                                             {OpKind::OverflowCheck, ProcessGroup::Tensor},
                                             {OpKind::GradNorm, ProcessGroup::Data},
                                             {OpKind::GradNorm, ProcessGroup::Tensor}}));
  EXPECT_EQ(stage1.comm.tensor_parallel[std::size_t(OpKind::OverflowCheck)].bytes, 1);
  EXPECT_EQ(stage1.comm.tensor_parallel[std::size_t(OpKind::GradNorm)].bytes, 4);
  config.zero.stage = 0;
  EXPECT_EQ(scalars(plan_tp(config, 2)), (std::vector<P>{{OpKind::OverflowCheck, ProcessGroup::Tensor},
                                                         {OpKind::GradNorm, ProcessGroup::Tensor}}));
  config.tensor_parallel = {};
  EXPECT_EQ(scalars(plan_tp(config, 2)), std::vector<P>{});
}

// Ranks are numbered TP innermost, then DP, then stages: with TP 2 x DP 3 x PP 2, rank 7 is TP rank
// 1 of DP rank 0 on stage 1 (7 = 1 + 2 x (0 + 3 x 1)); every rank has one place and back.
TEST(TensorParallel, RanksArePlacedTensorInnermost) {
  const ParallelShape shape{.tensor = 2, .data = 3, .pipeline = 2};
  EXPECT_EQ(place_of_rank(7, shape), (RankPlace{.tensor = 1, .data = 0, .stage = 1}));
  EXPECT_EQ(place_of_rank(4, shape), (RankPlace{.tensor = 0, .data = 2, .stage = 0}));
  for (int rank = 0; rank < shape.world(); ++rank)
    EXPECT_EQ(rank_at(place_of_rank(rank, shape), shape), rank);
}

TEST(TensorParallel, ConfigReadsAutotpSizeAndKeepsSequenceParallel) {
  Diagnostics diagnostics;
  const auto config = parse_training_config(
      nlohmann::json::parse(
          R"({"tensor_parallel": {"autotp_size": 4}, "zero_optimization": {"stage": 1}})"),
      diagnostics);
  EXPECT_EQ(config.tensor_parallel.size, 4);
  EXPECT_FALSE(config.tensor_parallel.sequence_parallel);
  TrainingConfig with_sp = config;
  with_sp.tensor_parallel.sequence_parallel = true;
  const auto written = to_deepspeed_json(with_sp);
  const auto read_back = parse_training_config(written, diagnostics);
  EXPECT_EQ(read_back.tensor_parallel.size, 4);
  EXPECT_TRUE(read_back.tensor_parallel.sequence_parallel);
  try {
    parse_training_config(nlohmann::json::parse(R"({"tensor_parallel": {"autotp_size": 0}})"),
                          diagnostics);
    FAIL() << "autotp_size 0 accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("tensor_parallel.autotp_size"), std::string::npos)
        << error.what();
  }
}

// DeepSpeed 0.19.8's AutoTP gathers the LM head's logits on every rank unless
// vocab_parallel_lm_head (module_inject/auto_tp.py): zerolens plans Megatron's vocab-parallel
// loss, and says so when a config asks for AutoTP without it.
TEST(TensorParallel, AutotpWithoutAVocabParallelHeadIsWarnedAbout) {
  const auto warnings_of = [](const char* text) {
    Diagnostics diagnostics;
    parse_training_config(nlohmann::json::parse(text), diagnostics);
    return diagnostics.warnings;
  };
  const auto gathered = warnings_of(R"({"tensor_parallel": {"autotp_size": 2}})");
  ASSERT_EQ(gathered.size(), 1u);
  EXPECT_NE(gathered.front().find("vocab_parallel_lm_head"), std::string::npos) << gathered.front();
  EXPECT_TRUE(
      warnings_of(R"({"tensor_parallel": {"autotp_size": 2, "vocab_parallel_lm_head": true}})")
          .empty());
  EXPECT_TRUE(warnings_of(R"({"tensor_parallel": {"autotp_size": 1}})").empty());
}

TEST(TensorParallel, ShapesThatDoNotSplitAreRefusedByName) {
  TransformerShape shape = tiny_shape();
  shape.heads = 3;
  shape.kv_heads = 3;
  shape.hidden = 12;
  try {
    build_transformer("m", shape, {.size = 2});
    FAIL() << "3 heads split over 2 ranks";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("model.heads"), std::string::npos) << error.what();
  }
  const Model layers = testing::flat_model(2, 10);
  EXPECT_THROW(tensor_parallel_shard(layers, {.size = 2}), InputError);
  EXPECT_EQ(tensor_parallel_shard(layers, {.size = 1}).parameter_count(), 20);
  // A TP group must fill a node evenly: 2 ranks do not fill 3-GPU nodes.
  try {
    plan_tp(tp_config(2, false), 2, 3);
    FAIL() << "a TP group of 2 on 3-GPU nodes";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("--tp"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace zerolens

namespace zerolens {
namespace {

// A model written as a layer list keeps its transformer shape, so a trace's recorded model can be
// split again (check-measured, the GUI reopening a TP trace); a shape that is not the layers' is
// refused.
TEST(TensorParallel, LayerListKeepsTheShapeToSplitAgain) {
  const Model whole = tiny(1);
  Diagnostics diagnostics;
  const nlohmann::json written = model_to_json(whole);
  const Model read = model_from_layers_json(written, diagnostics, "trace model");
  ASSERT_TRUE(read.shape.has_value());
  EXPECT_EQ(tensor_parallel_shard(read, {.size = 2}).parameter_count(), tiny(2).parameter_count());
  nlohmann::json other = written;
  other["transformer"]["layers"] = 3;
  try {
    model_from_layers_json(other, diagnostics, "trace model");
    FAIL() << "a 3-block shape over 2 blocks' layers";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("trace model.transformer"), std::string::npos)
        << error.what();
  }
  nlohmann::json partial = written;
  partial["transformer"].erase("vocab");
  EXPECT_THROW(model_from_layers_json(partial, diagnostics, "trace model"), InputError);
  nlohmann::json bad = written;
  bad["transformer"]["norm"] = "batchnorm";
  EXPECT_THROW(model_from_layers_json(bad, diagnostics, "trace model"), InputError);
}

}  // namespace
}  // namespace zerolens
