// fp16 overflows under mpirun (1, 2, 4 ranks): an inf written into one gradient on the last rank
// (an element the first rank owns, so the rank that sees it in its partition is not the one that
// made it) skips the step on every rank, leaves the parameters as they were and halves the loss
// scale; forced overflows walk the scale through the sequence DeepSpeed's rules give.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "engine_variants.hpp"
#include "exec/engine/loss_scaler.hpp"

namespace zerolens::exec {
namespace {

using testing::Offload;
using testing::Variant;

GradientFault last_rank_inf(std::int64_t step) {
  return {.step = step, .rank = testing::world_communicator().size() - 1, .tensor = 0, .element = 0};
}

std::vector<Variant> fp16_variants(int hysteresis, double static_scale = 0) {
  std::vector<Variant> variants;
  for (const int stage : {0, 1, 2, 3}) {
    const Variant base{.stage = stage, .precision = Precision::Fp16, .static_scale = static_scale, .hysteresis = hysteresis};
    variants.push_back(base);
    if (stage == 0) continue;
    Variant offloaded = base;
    offloaded.offload = Offload::Optimizer;
    variants.push_back(offloaded);
    if (stage < 3) continue;
    for (const Offload offload : {Offload::OptimizerAndParams, Offload::NvmeOptimizer, Offload::NvmeOptimizerAndParams}) {
      offloaded.offload = offload;
      variants.push_back(offloaded);
    }
  }
  return variants;
}

// Step 1 overflows on the last rank: every rank skips it, nothing moves, and with hysteresis 1
// the scale halves from 2^8 (static: stays); step 2 updates again.
void expect_skipped_step(const Variant& v, double scale_after) {
  SCOPED_TRACE(testing::name_of(v) + (v.static_scale > 0 ? " static" : ""));
  Communicator& comm = testing::world_communicator();
  const Plan plan = testing::variant_plan(v, comm.size());
  testing::ToyLayerModel model(testing::kVariantShape);
  MemoryLedger ledger;
  ZeroEngine engine(plan, comm, model, ledger, {.inject_inf = {last_rank_inf(1)}});
  EXPECT_FALSE(engine.step(0).skipped);
  const std::vector<float> before = engine.full_parameters();
  const Bytes norms = comm.count(OpKind::GradNorm).bytes;
  const StepReport overflowed = engine.step(1);
  EXPECT_TRUE(overflowed.skipped);
  EXPECT_EQ(overflowed.loss_scale, v.static_scale > 0 ? v.static_scale : 256);
  EXPECT_EQ(comm.count(OpKind::GradNorm).bytes, norms);  // no norm on a skipped step
  EXPECT_EQ(engine.full_parameters(), before);
  EXPECT_EQ(engine.loss_scale(), scale_after);
  const StepReport next = engine.step(2);
  EXPECT_FALSE(next.skipped);
  EXPECT_EQ(next.loss_scale, scale_after);
  EXPECT_NE(engine.full_parameters(), before);
}

TEST(ZeroOverflow, AnInfOnOneRankSkipsTheStepEverywhere) {
  for (const Variant& v : fp16_variants(1)) expect_skipped_step(v, 128);
  for (const Variant& v : fp16_variants(1, 64)) expect_skipped_step(v, 64);
}

// Hysteresis 2: the first overflow only counts down, the step is skipped all the same.
TEST(ZeroOverflow, HysteresisDelaysTheFirstHalving) {
  for (const Variant& v : fp16_variants(2)) expect_skipped_step(v, 256);
}

// Start 2^10, window 3, hysteresis 2, overflows forced at steps 1, 2, 3 and 8. DeepSpeed's
// update_scale (cur_iter = step, last_overflow_iter starts at -1), worked by hand:
//  0 good: (0+1) % 3 != 0, 1024     1 overflow: hysteresis 2 -> 1, 1024 kept
//  2 overflow: halve -> 512          3 overflow: halve -> 256 (last overflow 3)
//  4, 5 good                         6 good: (6-3) % 3 == 0 -> 512, hysteresis 2
//  7 good                            8 overflow: hysteresis 2 -> 1, 512 kept
//  9, 10 good                        11 good: (11-8) % 3 == 0 -> 1024
// so the scales the steps use are 1024 1024 1024 512 256 256 256 512 512 512 512 512, then 1024.
TEST(ZeroOverflow, ScaleSequenceFollowsDeepSpeedsRules) {
  Communicator& comm = testing::world_communicator();
  const std::vector<double> expected = {1024, 1024, 1024, 512, 256, 256, 256, 512, 512, 512, 512, 512};
  const std::vector<std::int64_t> overflows = {1, 2, 3, 8};
  for (const Variant& v : {Variant{.stage = 0, .precision = Precision::Fp16},
                           Variant{.stage = 2, .precision = Precision::Fp16},
                           Variant{.stage = 3, .precision = Precision::Fp16, .offload = Offload::OptimizerAndParams}}) {
    SCOPED_TRACE(testing::name_of(v));
    PlanRequest request = testing::variant_plan(v, comm.size()).request;
    request.config.precision.loss_scale.initial_scale_power = 10;
    request.config.precision.loss_scale.loss_scale_window = 3;
    const Plan plan = make_plan(request);
    EngineOptions options;
    for (const auto step : overflows) options.inject_inf.push_back(last_rank_inf(step));
    testing::ToyLayerModel model(testing::kVariantShape);
    MemoryLedger ledger;
    ZeroEngine engine(plan, comm, model, ledger, options);
    for (std::int64_t step = 0; step < std::int64_t(expected.size()); ++step) {
      const StepReport report = engine.step(step);
      EXPECT_EQ(report.loss_scale, expected[std::size_t(step)]) << step;
      EXPECT_EQ(report.skipped, std::count(overflows.begin(), overflows.end(), step) == 1) << step;
    }
    EXPECT_EQ(engine.loss_scale(), 1024);
  }
}

// Overflowing at min_loss_scale ends the run on every rank (DeepSpeed raises there).
TEST(ZeroOverflow, OverflowAtTheMinimumScaleStops) {
  Communicator& comm = testing::world_communicator();
  PlanRequest request = testing::variant_plan({.stage = 2, .precision = Precision::Fp16, .hysteresis = 1},
                                              comm.size()).request;
  request.config.precision.loss_scale.min_loss_scale = 128;
  const Plan plan = make_plan(request);
  testing::ToyLayerModel model(testing::kVariantShape);
  MemoryLedger ledger;
  ZeroEngine engine(plan, comm, model, ledger, {.inject_inf = {last_rank_inf(0), last_rank_inf(1)}});
  EXPECT_TRUE(engine.step(0).skipped);
  EXPECT_EQ(engine.loss_scale(), 128);
  EXPECT_THROW(engine.step(1), LossScaleError);
}

}  // namespace
}  // namespace zerolens::exec
