// The job's GPUs split other ways (the GUI's Compare tab, issue 20): which layouts are compared,
// which are left out and why, and each layout's figures against a plan of that layout made alone.
#include <gtest/gtest.h>

#include "sim/plan/variants.hpp"
#include "sim/predict/layouts.hpp"
#include "sim/predict/prediction.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

// A 4-block model of 2 heads on one 8-GPU node, bf16 ZeRO-3, micro-batch 2, global batch 16.
PlanRequest tiny_job() {
  PlanRequest request;
  request.model = build_transformer("tiny", testing::hand_worked_shape(4));
  request.config.zero.stage = 3;
  request.config.precision.precision = Precision::Bf16;
  request.config.batch.micro_batch_per_gpu = 2;
  request.config.seq_len = 16;
  request.dp_size = 8;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), 8, 0);
  return request;
}

PlanRequest with_layout(PlanRequest request, int tp, int pp, int stage, std::int64_t accumulation) {
  request.config.tensor_parallel.size = tp;
  request.config.pipeline.size = pp;
  request.config.zero.stage = stage;
  request.config.batch.gradient_accumulation_steps = accumulation;
  request.dp_size = 8 / (tp * pp);
  return request;
}

// TP 1, 2, 4, 8 x PP 1, 2, 4 (the blocks' divisors) with tp x pp dividing 8: nine layouts. TP 4
// and 8 do not split 2 heads: left out with the planner's words. The pipeline layouts run
// ZeRO-1 (DeepSpeed's pipeline engine refuses stage 3) at the same global batch: PP 2 x DP 4
// runs 16 / 4 / 2 = 2 micro-batches a step.
TEST(Layouts, EveryLayoutOfTheGpusAtTheJobsBatch) {
  const PlanRequest job = tiny_job();
  const LayoutComparison comparison = compare_layouts(job, {});
  std::vector<std::string> labels;
  for (const auto& layout : comparison.layouts) labels.push_back(layout.label());
  EXPECT_EQ(labels, (std::vector<std::string>{
                        "dp 8", "pp 2 x dp 4 (ZeRO-1)", "pp 4 x dp 2 (ZeRO-1)", "tp 2 x dp 4",
                        "tp 2 x pp 2 x dp 2 (ZeRO-1)", "tp 2 x pp 4 x dp 1 (ZeRO-1)"}));
  ASSERT_EQ(comparison.left_out.size(), 3u);
  for (const auto& [layout, reason] : comparison.left_out) {
    EXPECT_GE(layout.tensor, 4) << reason;
    EXPECT_NE(reason.find("heads"), std::string::npos) << reason;
  }
  // Each layout's figures are those of its own plan (a second path: make_plan and predict).
  struct Expected {
    int tp, pp, stage;
    std::int64_t accumulation;
  };
  const Expected expected[] = {{1, 1, 3, 1}, {1, 2, 1, 2}, {1, 4, 1, 4},
                               {2, 1, 3, 2}, {2, 2, 1, 4}, {2, 4, 1, 8}};
  for (std::size_t i = 0; i < comparison.layouts.size(); ++i) {
    const LayoutPlan& compared = comparison.layouts[i];
    const Expected& e = expected[i];
    EXPECT_EQ(compared.current, i == 0) << labels[i];
    EXPECT_EQ(compared.result.point.grad_accumulation, e.accumulation) << labels[i];
    const Prediction alone = predict(with_layout(job, e.tp, e.pp, e.stage, e.accumulation));
    EXPECT_EQ(compared.result.peak[std::size_t(Device::Gpu)], alone.plan.device(Device::Gpu).peak)
        << labels[i];
    EXPECT_NEAR(compared.result.step_time, alone.timeline.step_time,
                1e-9 * alone.timeline.step_time)
        << labels[i];
  }
}

// A batch a layout's data-parallel ranks cannot split is left out, saying so.
TEST(Layouts, ABatchTheRanksCannotSplitIsLeftOut) {
  PlanRequest job = tiny_job();
  job.config.batch.micro_batch_per_gpu = 1;
  job.config.tensor_parallel.size = 2;
  job.dp_size = 4;  // global batch 4: DP 8 would get half a sample each
  const LayoutComparison comparison = compare_layouts(job, {});
  bool dp8_left_out = false;
  for (const auto& [layout, reason] : comparison.left_out) {
    if (layout.data != 8) continue;
    dp8_left_out = true;
    EXPECT_NE(reason.find("global batch 4 does not split over 8"), std::string::npos) << reason;
  }
  EXPECT_TRUE(dp8_left_out);
  int current = 0;
  for (const auto& layout : comparison.layouts) current += layout.current ? 1 : 0;
  EXPECT_EQ(current, 1);
}

}  // namespace
}  // namespace zerolens
