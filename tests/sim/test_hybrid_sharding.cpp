// Hybrid sharding (issue 20): DeepSpeed's MiCS and FSDP's HSDP partition stage 3's states over
// shard groups and replicate them across the groups. Worked by hand, and against plain ZeRO-3 on
// a shard group's ranks (a second code path for the memory).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sim/config/overrides.hpp"
#include "sim/schedule/comm.hpp"
#include "sim/schedule/memory_replay.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

Model tiny() { return build_transformer("tiny", testing::hand_worked_shape(2)); }

TrainingConfig zero3(int shard_group, Framework framework = Framework::DeepSpeed) {
  TrainingConfig config;
  config.framework = framework;
  config.zero.stage = 3;
  config.zero.stage3_param_persistence_threshold = 0;
  config.precision.precision = Precision::Bf16;
  config.batch.micro_batch_per_gpu = 2;
  config.seq_len = 16;
  config.zero.shard_group_size = shard_group;
  return config;
}

Plan plan_on(const TrainingConfig& config, int dp) {
  PlanRequest request;
  request.model = tiny();
  request.config = config;
  request.dp_size = dp;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), dp, 0);
  return make_plan(request);
}

// Partitions over a shard group of 4 are what plain ZeRO-3 over 4 ranks holds, whatever the
// data-parallel size; only the replicas' all-reduce is new.
TEST(HybridSharding, ShardGroupHoldsWhatZero3OverItsRanksHolds) {
  for (const auto framework : {Framework::DeepSpeed, Framework::Fsdp2}) {
    const Plan hybrid = plan_on(zero3(4, framework), 16);
    const Plan plain = plan_on(zero3(0, framework), 4);
    const auto hybrid_highs = category_highs(hybrid.schedule);
    const auto plain_highs = category_highs(plain.schedule);
    for (const auto category :
         {Category::Params, Category::Grads, Category::MasterParams, Category::OptimizerStates}) {
      EXPECT_EQ(hybrid_highs[0][std::size_t(category)], plain_highs[0][std::size_t(category)])
          << to_string(category) << " " << to_string(framework);
    }
    EXPECT_EQ(hybrid.comm.of(OpKind::ReduceScatter).bytes,
              plain.comm.of(OpKind::ReduceScatter).bytes);
    EXPECT_EQ(hybrid.comm.of(OpKind::AllGather).bytes, plain.comm.of(OpKind::AllGather).bytes);
    EXPECT_EQ(plain.comm.collectives[std::size_t(OpKind::AllReduce)].calls, 0);
  }
}

// Every tensor of the two-block model split 4 ways (ceil(numel / 4) each, persistence 0): the
// reduce-scatters carry 4 x that in bf16, and the replicas all-reduce one partition's worth, over
// groups of 16 / 4 = 4 ranks 4 apart.
TEST(HybridSharding, ReplicasAllReduceTheReducedPartitionWorkedByHand) {
  const Plan plan = plan_on(zero3(4), 16);
  Elements partition = 0;
  for (const auto& layer : plan.rank_model.layers) {
    for (const auto& tensor : layer.params) partition += (tensor.numel() + 3) / 4;
  }
  EXPECT_EQ(plan.comm.of(OpKind::ReduceScatter).bytes, 4 * partition * 2);
  int replicate_ops = 0;
  Bytes replicate_bytes = 0;
  for (const auto& op : plan.schedule.ops) {
    if (op.group == ProcessGroup::Replicate) {
      EXPECT_EQ(op.kind, OpKind::AllReduce);
      EXPECT_EQ(op.group_size, 4);
      ++replicate_ops;
      replicate_bytes += op.bytes;
    }
    if (op.kind == OpKind::ReduceScatter || op.kind == OpKind::AllGather) {
      EXPECT_EQ(op.group_size, 4);
    }
  }
  EXPECT_GT(replicate_ops, 0);
  EXPECT_EQ(replicate_bytes, partition * 2);
  EXPECT_EQ(plan.comm.replicate[std::size_t(OpKind::AllReduce)].bytes, partition * 2);
  EXPECT_EQ(plan.comm.collectives[std::size_t(OpKind::AllReduce)].calls, 0);
  // 16 ranks on two 8-GPU nodes: a shard group's 4 ranks share a node, a replicate group's 4 ranks
  // are 4 apart: 2 on each node. Its all-reduce of S sends 2 x 1/2 S inside and 2 x 1/4 S across.
  EXPECT_EQ(plan.comm.links.inter_node, partition * 2 / 2);
}

// MiCS all-reduces the partitions at the accumulation boundary only; HSDP after every micro-step.
TEST(HybridSharding, MicsReducesReplicasOncePerStepHsdpEveryMicroStep) {
  auto replicate_calls = [](const Plan& plan) {
    int calls = 0;
    for (const auto& op : plan.schedule.ops) calls += op.group == ProcessGroup::Replicate;
    return calls;
  };
  TrainingConfig mics = zero3(4);
  TrainingConfig hsdp = zero3(4, Framework::Fsdp2);
  const int once_mics = replicate_calls(plan_on(mics, 16));
  const int once_hsdp = replicate_calls(plan_on(hsdp, 16));
  mics.batch.gradient_accumulation_steps = 3;
  hsdp.batch.gradient_accumulation_steps = 3;
  EXPECT_EQ(replicate_calls(plan_on(mics, 16)), once_mics);
  EXPECT_EQ(replicate_calls(plan_on(hsdp, 16)), 3 * once_hsdp);
}

TEST(HybridSharding, ConfigReadsMicsShardSizeAndRefusesBelowStage3) {
  Diagnostics diagnostics;
  const auto config = parse_training_config(
      nlohmann::json::parse(R"({"zero_optimization": {"stage": 3, "mics_shard_size": 8}})"),
      diagnostics);
  EXPECT_EQ(config.zero.shard_group_size, 8);
  const auto off = parse_training_config(
      nlohmann::json::parse(R"({"zero_optimization": {"stage": 3, "mics_shard_size": -1}})"),
      diagnostics);
  EXPECT_EQ(off.zero.shard_group_size, 0);
  try {
    parse_training_config(
        nlohmann::json::parse(R"({"zero_optimization": {"stage": 2, "mics_shard_size": 8}})"),
        diagnostics);
    FAIL() << "MiCS at stage 2";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("zero_optimization.mics_shard_size"),
              std::string::npos);
  }
  EXPECT_THROW(plan_on(zero3(3), 8), InputError);  // 3 does not divide 8
}

}  // namespace
}  // namespace zerolens
