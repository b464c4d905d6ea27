// Communication volumes against hand-worked examples (bus-bandwidth factors as nccl-tests defines
// them: 2(n-1)/n for all-reduce, (n-1)/n for reduce-scatter and all-gather).
#include <gtest/gtest.h>

#include "sim/schedule/comm.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

// Psi = 4 tensors x 1000 elements = 4000 parameters, fp16: 8000 bytes of gradients.
Plan four_rank_plan(int stage, int grad_accumulation = 1, Precision precision = Precision::Fp16) {
  TrainingConfig config = testing::mixed_adam(stage, precision);
  config.batch.gradient_accumulation_steps = grad_accumulation;
  config.zero.stage3_max_reuse_distance = 0;
  config.zero.stage3_prefetch_bucket_size = 0;
  config.zero.stage3_param_persistence_threshold = 0;
  return testing::plan_of(testing::flat_model(4, 1000), config, 4);
}

TEST(CommVolumes, DataParallelAllReducesTwoPsi) {
  const Plan plan = four_rank_plan(0);
  const auto& all_reduce = plan.comm.of(OpKind::AllReduce);
  EXPECT_EQ(all_reduce.calls, 1);
  EXPECT_EQ(all_reduce.bytes, 8000);
  EXPECT_EQ(all_reduce.traffic_bytes, 12000);  // 2 * 3/4 * 8000
  EXPECT_EQ(plan.comm.links.intra_node, 12000);
  EXPECT_EQ(plan.comm.links.inter_node, 0);
  EXPECT_EQ(plan.comm.of(OpKind::AllGather).calls, 0);
}

TEST(CommVolumes, Stage2ReduceScattersAndAllGathersTwoPsi) {
  const Plan plan = four_rank_plan(2);
  EXPECT_EQ(plan.comm.of(OpKind::ReduceScatter).calls, 1);
  EXPECT_EQ(plan.comm.of(OpKind::ReduceScatter).traffic_bytes, 6000);  // 3/4 * 8000
  EXPECT_EQ(plan.comm.of(OpKind::AllGather).calls, 1);
  EXPECT_EQ(plan.comm.of(OpKind::AllGather).bytes, 8000);
  EXPECT_EQ(plan.comm.of(OpKind::AllGather).traffic_bytes, 6000);
  // fp16: the overflow flag (1 byte) and the gradient norm (4 bytes) are all-reduced too.
  EXPECT_EQ(plan.comm.of(OpKind::OverflowCheck).bytes, 1);
  EXPECT_EQ(plan.comm.of(OpKind::GradNorm).bytes, 4);
  EXPECT_EQ(plan.comm.links.intra_node, 6000 + 6000 + 1 + 6);  // floor(2*3/4*1) = 1, 2*3/4*4 = 6
}

TEST(CommVolumes, Stage1MatchesStage2) {
  const Plan stage1 = four_rank_plan(1), stage2 = four_rank_plan(2);
  EXPECT_EQ(stage1.comm.links.intra_node, stage2.comm.links.intra_node);
}

TEST(CommVolumes, Stage3MovesThreePsi) {
  const Plan plan = four_rank_plan(3, 1, Precision::Bf16);
  EXPECT_EQ(plan.comm.of(OpKind::AllGather).calls, 8);           // each layer, forward and backward
  EXPECT_EQ(plan.comm.of(OpKind::AllGather).traffic_bytes, 12000);  // 2 x 3/4 x 8000
  EXPECT_EQ(plan.comm.of(OpKind::ReduceScatter).traffic_bytes, 6000);
  EXPECT_EQ(plan.comm.links.intra_node, 18000 + 6);  // 3 Psi x 3/4 x 2 bytes, plus the norm
}

TEST(CommVolumes, GradientAccumulationReducesOncePerBoundaryForStages01) {
  EXPECT_EQ(four_rank_plan(0, 3).comm.of(OpKind::AllReduce).calls, 1);
  EXPECT_EQ(four_rank_plan(1, 3).comm.of(OpKind::ReduceScatter).calls, 1);
  EXPECT_EQ(four_rank_plan(2, 3).comm.of(OpKind::ReduceScatter).calls, 3);
  EXPECT_EQ(four_rank_plan(2, 3).comm.of(OpKind::AllGather).calls, 1);
  EXPECT_EQ(four_rank_plan(3, 3, Precision::Bf16).comm.of(OpKind::ReduceScatter).calls, 3);
  EXPECT_EQ(four_rank_plan(3, 3, Precision::Bf16).comm.of(OpKind::AllGather).calls, 24);
}

TEST(CommVolumes, BucketsFlushBeforeExceedingReduceBucketSize) {
  // Ten 1000-element tensors with reduce_bucket_size 2500: a bucket is flushed when adding the next
  // tensor would exceed the size, so buckets hold two tensors: five reductions.
  TrainingConfig config = testing::mixed_adam(2);
  config.zero.reduce_bucket_size = 2500;
  const Plan plan = testing::plan_of(testing::flat_model(10, 1000), config, 4);
  EXPECT_EQ(plan.comm.of(OpKind::ReduceScatter).calls, 5);
  EXPECT_EQ(plan.comm.of(OpKind::ReduceScatter).bytes, 20000);
}

TEST(CommVolumes, AllGatherShardsFollowAllgatherBucketSize) {
  TrainingConfig config = testing::mixed_adam(1);
  config.zero.allgather_bucket_size = 1000;  // 4000 elements gathered -> 4 shards
  const Plan plan = testing::plan_of(testing::flat_model(4, 1000), config, 4);
  EXPECT_EQ(plan.comm.of(OpKind::AllGather).calls, 4);
  EXPECT_EQ(plan.comm.of(OpKind::AllGather).bytes, 8000);
}

TEST(CommVolumes, HierarchicalSplitAcrossNodes) {
  // 16 ranks on 2 nodes of 8: all-reduce of S = 8000 bytes sends 2*7/8*S = 14000 bytes inside the
  // node and 2*(1/2)*S/8 = 1000 bytes across nodes; together 2*15/16*S = 15000.
  const LinkTraffic traffic = collective_traffic(OpKind::AllReduce, 8000, group_shape(16, 8));
  EXPECT_EQ(traffic.intra_node, 14000);
  EXPECT_EQ(traffic.inter_node, 1000);
  const LinkTraffic gather = collective_traffic(OpKind::AllGather, 8000, group_shape(16, 8));
  EXPECT_EQ(gather.intra_node + gather.inter_node, 8000 * 15 / 16);
  const Plan plan = testing::plan_of(testing::flat_model(4, 1000), testing::mixed_adam(0), 16, 8);
  EXPECT_EQ(plan.comm.links.intra_node, 14000);
  EXPECT_EQ(plan.comm.links.inter_node, 1000);
}

TEST(CommVolumes, SingleRankSendsNothing) {
  const Plan plan = testing::plan_of(testing::flat_model(4, 1000), testing::mixed_adam(3), 1);
  EXPECT_EQ(plan.comm.links.intra_node + plan.comm.links.inter_node, 0);
}

TEST(CommVolumes, OffloadTrafficCrossesPcie) {
  // ZeRO-Offload stage 2, 4 ranks: each rank sends its fp16 gradient partition (1000 elements,
  // 2000 bytes) to the host and receives its updated fp16 parameter partition (2000 bytes).
  TrainingConfig config = testing::mixed_adam(2);
  config.zero.offload_optimizer.device = OffloadDevice::Cpu;
  const Plan plan = testing::plan_of(testing::flat_model(4, 1000), config, 4);
  EXPECT_EQ(plan.comm.links.pcie_d2h, 2000);
  EXPECT_EQ(plan.comm.links.pcie_h2d, 2000);
}

TEST(CommVolumes, NvmeOptimizerSwapsStatesPerSubGroup) {
  // ZeRO-Infinity: the optimizer partition (1000 elements of fp32 master + Adam m, v = 12 bytes
  // each) is read from and written back to NVMe in sub-groups of 400 elements: 3 reads, 3 writes.
  TrainingConfig config = testing::mixed_adam(3);
  config.zero.offload_optimizer.device = OffloadDevice::Nvme;
  config.zero.offload_optimizer.nvme_path = "/nvme";
  config.zero.sub_group_size = 400;
  const Plan plan = testing::plan_of(testing::flat_model(4, 1000), config, 4);
  EXPECT_EQ(plan.comm.links.nvme_read, 12000);
  EXPECT_EQ(plan.comm.links.nvme_write, 12000);
  int reads = 0;
  for (const auto& op : plan.schedule.ops) reads += op.kind == OpKind::NvmeRead;
  EXPECT_EQ(reads, 3);
}

}  // namespace
}  // namespace zerolens
