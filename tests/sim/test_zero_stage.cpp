// What each ZeRO stage means (sim/config/zero_stage.hpp), against a table worked out by hand from
// the ZeRO paper and DeepSpeed's stage_1_and_2.py / stage3.py; the labels built from it; and whose
// bytes each memory component holds.
#include <gtest/gtest.h>

#include "sim/config/config.hpp"
#include "sim/schedule/schedule.hpp"

namespace zerolens {
namespace {

struct StageRow {
  int stage;
  bool optimizer_states, gradients, parameters;  // partitioned across the ranks
  bool boundary;                                 // gradients reduced once per step
  bool flat;                                     // one flat range of all parameters per rank
  bool only_optimizer_states, gradients_not_parameters;
  bool optimizer_offload, param_offload, nvme_swap;
  const char* name;
  const char* description;
};

const StageRow kStages[] = {
    {0, false, false, false, true, false, false, false, false, false, false, "DP",
     "plain data parallelism (ZeRO stage 0)"},
    {1, true, false, false, true, true, true, false, true, false, false, "ZeRO-1", "ZeRO stage 1"},
    {2, true, true, false, false, true, false, true, true, false, false, "ZeRO-2", "ZeRO stage 2"},
    {3, true, true, true, false, false, false, false, true, true, true, "ZeRO-3", "ZeRO stage 3"},
};

TEST(ZeroStage, AnswersAsTheHandWorkedTable) {
  for (const StageRow& row : kStages) {
    SCOPED_TRACE("stage " + std::to_string(row.stage));
    const ZeroStage stage{row.stage};
    EXPECT_TRUE(stage.valid());
    EXPECT_EQ(stage.partitions_optimizer_states(), row.optimizer_states);
    EXPECT_EQ(stage.partitions_gradients(), row.gradients);
    EXPECT_EQ(stage.partitions_parameters(), row.parameters);
    EXPECT_EQ(stage.reduces_at_boundary(), row.boundary);
    EXPECT_EQ(stage.uses_flat_partition(), row.flat);
    EXPECT_EQ(stage.partitions_only_optimizer_states(), row.only_optimizer_states);
    EXPECT_EQ(stage.partitions_gradients_not_parameters(), row.gradients_not_parameters);
    EXPECT_EQ(stage.offload_allowed(OffloadKind::Optimizer), row.optimizer_offload);
    EXPECT_EQ(stage.offload_allowed(OffloadKind::Param), row.param_offload);
    EXPECT_EQ(stage.swaps_optimizer_to_nvme(), row.nvme_swap);
    EXPECT_EQ(stage.name(), row.name);
    EXPECT_EQ(stage.description(), row.description);
  }
  EXPECT_FALSE(ZeroStage{-1}.valid());
  EXPECT_FALSE(ZeroStage{4}.valid());
}

TEST(ZeroStage, ConfigAsksItsStage) {
  for (const StageRow& row : kStages) {
    ZeroConfig zero;
    zero.stage = row.stage;
    EXPECT_EQ(zero.partitions_optimizer_states(), row.optimizer_states);
    EXPECT_EQ(zero.partitions_gradients(), row.gradients);
    EXPECT_EQ(zero.partitions_parameters(), row.parameters);
    EXPECT_EQ(zero.reduces_at_boundary(), row.boundary);
    EXPECT_EQ(zero.offload_allowed(OffloadKind::Param), row.param_offload);
    EXPECT_EQ(zero.overlap(), row.parameters);  // DeepSpeed's overlap_comm default
    EXPECT_EQ(ScheduleContext{.stage = row.stage}.zero_stage().name(), row.name);
  }
}

ZeroConfig zero_of(int stage, OffloadDevice optimizer, OffloadDevice param) {
  ZeroConfig zero;
  zero.stage = stage;
  zero.offload_optimizer.device = optimizer;
  zero.offload_param.device = param;
  return zero;
}

// An offload the stage does not allow is no offload: not in the label, not in the schedule.
TEST(ZeroStage, LabelsNameTheOffloadsTheStageApplies) {
  const auto none = OffloadDevice::None, cpu = OffloadDevice::Cpu, nvme = OffloadDevice::Nvme;
  EXPECT_EQ(zero_of(0, none, none).label(), "DP");
  EXPECT_EQ(zero_of(0, cpu, cpu).label(), "DP");
  EXPECT_EQ(zero_of(2, cpu, cpu).label(), "ZeRO-2 + opt:cpu");
  EXPECT_EQ(zero_of(3, nvme, nvme).label(), "ZeRO-3 + opt:nvme + param:nvme");
  EXPECT_EQ(zero_of(0, none, none).description(), "DP (stage 0)");
  EXPECT_EQ(zero_of(1, cpu, none).description(), "ZeRO-1, optimizer offload cpu");
  EXPECT_EQ(zero_of(3, cpu, nvme).description(),
            "ZeRO-3, optimizer offload cpu, param offload nvme");
  EXPECT_EQ(zero_of(2, cpu, cpu).effective_offload(OffloadKind::Param), none);
  EXPECT_EQ(zero_of(2, cpu, cpu).effective_offload(OffloadKind::Optimizer), cpu);
}

TEST(Sharing, PartitionsBelongToTheRankFullCopiesToEveryRank) {
  EXPECT_EQ(sharing_of(Component::ParamsPartition), Sharing::Partitioned);
  EXPECT_EQ(sharing_of(Component::OptimizerStatePartition), Sharing::Partitioned);
  EXPECT_EQ(sharing_of(Component::Fp32GradCast), Sharing::Partitioned);
  EXPECT_EQ(sharing_of(Component::ParamsFull), Sharing::Replicated);
  EXPECT_EQ(sharing_of(Component::GatheredParams), Sharing::Replicated);
  EXPECT_EQ(sharing_of(Component::ReduceBucket), Sharing::Replicated);
  EXPECT_EQ(sharing_of(Component::ActivationsStored), Sharing::Unshared);
  EXPECT_EQ(sharing_of(Component::CudaContext), Sharing::Unshared);
  EXPECT_EQ(sharing_of(Component::NvmeSwapBuffers), Sharing::Unshared);
  // Every model-state category but the buffers is some rank's share.
  for (int c = 0; c < kComponentCount; ++c) {
    const Category category = category_of(Component(c));
    if (category == Category::Params || category == Category::Grads ||
        category == Category::MasterParams || category == Category::OptimizerStates) {
      EXPECT_NE(sharing_of(Component(c)), Sharing::Unshared) << to_string(Component(c));
    }
  }
}

}  // namespace
}  // namespace zerolens
