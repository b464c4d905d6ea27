// Why-lines: the walkthrough's gathers, releases and reductions name the 1/N share and the layer;
// a prefetched gather says so; a tied LM head's gather names the embedding; other stages,
// offload and tensor parallelism get their own reason; every op of every variant gets one or
// none without failing.
#include <gtest/gtest.h>

#include "sim/plan/variants.hpp"
#include "sim/plan/walkthrough.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

std::string reason_of_first(const Plan& plan, OpKind kind, Phase phase) {
  const auto& ops = plan.schedule.ops;
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == kind && ops[i].phase == phase)
      return op_reason(plan.schedule, i, plan.rank_model);
  ADD_FAILURE() << "no " << to_string(kind) << " in " << to_string(phase);
  return {};
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(OpReason, WalkthroughGathersReleasesAndReductions) {
  const Plan plan = make_plan(walkthrough_request());
  const std::string gather = reason_of_first(plan, OpKind::AllGather, Phase::Forward);
  EXPECT_TRUE(has(gather, "1/4") && has(gather, "embedding") && has(gather, "forward")) << gather;
  EXPECT_FALSE(has(gather, "prefetch")) << "the walkthrough does not prefetch";
  EXPECT_TRUE(has(reason_of_first(plan, OpKind::Release, Phase::Forward), "1/4 partition stays"));
  EXPECT_TRUE(has(reason_of_first(plan, OpKind::ReduceScatter, Phase::Backward),
                  "summed over the 4 ranks"));
  EXPECT_TRUE(has(reason_of_first(plan, OpKind::OptimizerStep, Phase::Optimizer), "only its 1/4"));
  // The tied LM head uses the embedding's weights: its gather is not a prefetch.
  bool tied = false;
  for (std::size_t i = 0; i < plan.schedule.ops.size(); ++i) {
    const std::string reason = op_reason(plan.schedule, i, plan.rank_model);
    tied |= has(reason, "whose weights lm_head shares");
    EXPECT_FALSE(has(reason, "prefetch")) << i << ": " << reason;
  }
  EXPECT_TRUE(tied);
}

TEST(OpReason, PrefetchedGathersSaySo) {
  PlanRequest request = walkthrough_request();
  request.config.zero.stage3_prefetch_bucket_size = 1e9;  // gather the next layers ahead
  const Plan plan = make_plan(request);
  int prefetched = 0;
  for (std::size_t i = 0; i < plan.schedule.ops.size(); ++i)
    prefetched += has(op_reason(plan.schedule, i, plan.rank_model), "prefetch: ZeRO-3 gathers");
  EXPECT_GT(prefetched, 0);
}

TEST(OpReason, OtherStagesOffloadAndTensorParallelism) {
  PlanRequest request = walkthrough_request();
  request.config = apply_variant(request.config,
                                 {"", 0, OffloadDevice::None, OffloadDevice::None, std::nullopt});
  const Plan plain = make_plan(request);
  bool data_parallel = false;
  for (std::size_t i = 0; i < plain.schedule.ops.size(); ++i)
    if (plain.schedule.ops[i].kind == OpKind::AllReduce && plain.schedule.ops[i].bucket >= 0)
      data_parallel = has(op_reason(plain.schedule, i, plain.rank_model), "plain data parallelism");
  EXPECT_TRUE(data_parallel);
  request.config =
      apply_variant(request.config, {"", 2, OffloadDevice::Cpu, OffloadDevice::None, std::nullopt});
  const Plan offloaded = make_plan(request);
  EXPECT_TRUE(has(reason_of_first(offloaded, OpKind::CopyD2H, Phase::Backward), "CPU optimizer"));
  EXPECT_TRUE(has(reason_of_first(offloaded, OpKind::CopyH2D, Phase::Optimizer),
                  "updated 16-bit parameters"));
  request.config = apply_variant(request.config,
                                 {"", 2, OffloadDevice::None, OffloadDevice::None, std::nullopt});
  EXPECT_TRUE(has(reason_of_first(make_plan(request), OpKind::AllGather, Phase::Optimizer),
                  "updated partitions"));
  request.config.tensor_parallel.size = 2;
  request.dp_size = 2;
  const Plan tensor = make_plan(request);
  bool megatron = false;
  for (std::size_t i = 0; i < tensor.schedule.ops.size(); ++i)
    megatron |= has(op_reason(tensor.schedule, i, tensor.rank_model), "Megatron's g operator");
  EXPECT_TRUE(megatron);
}

}  // namespace
}  // namespace zerolens
