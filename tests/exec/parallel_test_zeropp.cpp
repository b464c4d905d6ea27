// ZeRO++'s quantized collectives in the CPU executor, under mpirun (ctest exec.parallel.np4 and
// np8): qwZ (int8 weight all-gathers) and qgZ (int4 gradient all-to-alls within and across
// nodes) train gpt2-tiny as plain ZeRO-3 trains it on the same global batch, within a looser
// tolerance; every step moves the schedule's bytes on each group; model states are the plan's.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "parallel_support.hpp"
#include "sim/schedule/zeropp.hpp"

namespace zerolens::exec {
namespace {

using namespace testing;  // parallel_support.hpp

constexpr int kSteps = 5;

const Gpt2Setup kZero3{.stage = 3, .micro_batch = 2, .seq_len = 32, .grad_accumulation = 2};

Gpt2Setup zeropp(bool weights, bool gradients, int gpus_per_node, Precision precision) {
  Gpt2Setup setup = kZero3;
  setup.quantized_weights = weights;
  setup.quantized_gradients = gradients;
  setup.gpus_per_node = gpus_per_node;
  setup.precision = precision;
  return setup;
}

using Counts = std::array<CollectiveCount, kOpKindCount>;

Counts counts_of(const Communicator* comm) {
  Counts counts{};
  if (comm == nullptr) return counts;
  for (int k = 0; k < kOpKindCount; ++k) counts[std::size_t(k)] = comm->count(OpKind(k));
  return counts;
}

// One step's bytes per kind (the last step's counts less the one before) equal the plan's.
void expect_bytes(const std::array<CollectiveTotals, kOpKindCount>& planned, const Counts& before,
                  const Counts& after, const char* group) {
  for (int k = 0; k < kOpKindCount; ++k) {
    const Bytes measured = after[std::size_t(k)].bytes - before[std::size_t(k)].bytes;
    EXPECT_EQ(measured, planned[std::size_t(k)].bytes) << group << " " << to_string(OpKind(k));
  }
}

struct QuantizedRun {
  Trained trained;
  Counts data_before{}, data_after{}, node_before{}, node_after{}, cross_before{}, cross_after{};
};

// parallel_support's train(), keeping each group's counts around the last step.
QuantizedRun train_counted(const Plan& plan, const Gpt2Setup& s) {
  const auto groups =
      std::make_shared<const ProcessGroups>(world(), plan.schedule.context.parallel_shape());
  MemoryLedger ledger;
  Gpt2Model model(rank_model(plan, 0),
                  {.micro_batch = s.micro_batch,
                   .seq_len = s.seq_len,
                   .activation_element_bytes = plan.request.config.precision.param_bytes()},
                  ledger);
  ZeroEngine engine(plan, groups, model, ledger);
  QuantizedRun run;
  Trained& t = run.trained;
  for (int step = 0; step < kSteps; ++step) {
    run.data_before = counts_of(&groups->data());
    run.node_before = counts_of(engine.node_group());
    run.cross_before = counts_of(engine.cross_node_group());
    ledger.reset_peaks();
    t.losses.push_back(engine.step(step).loss);
    if (ledger.peak(Device::Gpu) > t.measured_peak) {
      t.measured_peak = ledger.peak(Device::Gpu);
      t.at_peak = ledger.categories_at_peak(Device::Gpu);
    }
    const CategoryBytes highs = ledger.category_highs(Device::Gpu);
    for (std::size_t c = 0; c < highs.size(); ++c) t.highs[c] = std::max(t.highs[c], highs[c]);
  }
  run.data_after = counts_of(&groups->data());
  run.node_after = counts_of(engine.node_group());
  run.cross_after = counts_of(engine.cross_node_group());
  t.parameters = engine.full_parameters();
  return run;
}

double worst_loss_difference(const Trained& run, const Trained& reference) {
  double worst = 0;
  for (std::size_t step = 0; step < run.losses.size(); ++step)
    worst = std::max(worst, std::abs(run.losses[step] - reference.losses[step]));
  return worst;
}

// The tolerance, from the quantization error. qwZ: every weight the layers compute with is within
// half a step, max|w| / 254, of its int8 block's largest magnitude (kernels/quantize.hpp), 0.4 %
// of the block's scale; the fp16 dequantization adds 2^-11 relative. Logits move by a like
// fraction through the 2 blocks and the head, and the cross-entropy by at most twice the largest
// logit change (its gradient in the logits has an L1 norm of at most 2): with logits of order 1,
// some 1e-2. qgZ: each gradient element is within max|g| / 14 of its int4 block's largest
// (twice: within the node, then across nodes), up to 14 % of the block's scale, and Adam
// (lr 3e-3) turns a perturbed gradient into an update of the same order as the true one, so each
// weight may drift by up to ~lr a step: over 5 steps a few 1e-2 in the loss at worst. Measured
// (printed below): well inside both.
constexpr double kQuantizedWeightsTolerance = 2e-2;
constexpr double kQuantizedGradientsTolerance = 5e-2;

void expect_follows_zero3(const std::vector<Gpt2Setup>& variants) {
  std::vector<Trained> references;
  for (const Precision precision : {Precision::Fp32, Precision::Bf16}) {
    Gpt2Setup reference = kZero3;
    reference.precision = precision;
    references.push_back(train(gpt2_plan(reference, world().size()), reference, kSteps));
  }
  for (const Gpt2Setup& setup : variants) {
    SCOPED_TRACE(name_of(setup));
    const Plan plan = gpt2_plan(setup, world().size());
    const QuantizedRun run = train_counted(plan, setup);
    const Trained& reference = references[setup.precision == Precision::Fp32 ? 0 : 1];
    const double worst = worst_loss_difference(run.trained, reference);
    const double tolerance =
        setup.quantized_gradients ? kQuantizedGradientsTolerance : kQuantizedWeightsTolerance;
    EXPECT_LT(worst, tolerance) << loss_differences(run.trained, reference);
    EXPECT_TRUE(std::isfinite(run.trained.losses.back()));
    // The first step's forward computes on the initial weights: qgZ alone cannot change its loss.
    if (!setup.quantized_weights) {
      EXPECT_EQ(run.trained.losses[0], reference.losses[0]);
    }
    EXPECT_NE(run.trained.losses.back(), reference.losses.back())
        << "the quantized run computed exactly what plain ZeRO-3 did";
    if (world().rank() == 0) {
      std::printf("[ ZeRO++  ] np%d %s: loss - ZeRO-3's %s (worst %.2e)\n", world().size(),
                  name_of(setup).c_str(), loss_differences(run.trained, reference).c_str(), worst);
    }
    expect_bytes(plan.comm.collectives, run.data_before, run.data_after, "data-parallel");
    expect_bytes(plan.comm.node_local, run.node_before, run.node_after, "node");
    expect_bytes(plan.comm.cross_node, run.cross_before, run.cross_after, "cross-node");
    expect_memory_of(plan.schedule, run.trained);
  }
}

// The last variant offloads the optimizer and the parameters to the host: qwZ quantizes the
// partitions its CopyH2D staged, qgZ's reduced parts go to the host by the bucket's CopyD2H.
TEST(ZeroPlusPlus, QuantizedCollectivesFollowZero3OnFourRanks) {
  if (world().size() != 4) GTEST_SKIP() << "the 4-rank variants need 4 ranks";
  using P = Precision;
  Gpt2Setup offloaded = zeropp(true, true, 2, P::Bf16);
  offloaded.offload_optimizer = offloaded.offload_param = true;
  expect_follows_zero3({zeropp(true, false, 8, P::Fp32), zeropp(true, false, 8, P::Bf16),
                        zeropp(false, true, 2, P::Fp32), zeropp(false, true, 8, P::Bf16),
                        zeropp(true, true, 2, P::Bf16), offloaded});
}

// fp16: an infinity in one rank's quantized gradient makes its int4 block's scale NaN
// (kernels/quantize.hpp), so the reduced partitions hold NaN and every rank skips that step, as
// with plain ZeRO-3; the steps around it update.
TEST(ZeroPlusPlus, AnInfinityInAQuantizedGradientSkipsTheStep) {
  if (world().size() != 4) GTEST_SKIP() << "2 nodes of 2 need 4 ranks";
  const Gpt2Setup setup = zeropp(false, true, 2, Precision::Fp16);
  const Plan plan = gpt2_plan(setup, 4);
  std::int32_t tensor = 0;  // the first gradient qgZ quantizes
  const auto specs = tensors_of(plan.rank_model);
  while (!qgz_tensor(specs[std::size_t(tensor)]->shape, 4, 2).quantized) ++tensor;
  const auto groups =
      std::make_shared<const ProcessGroups>(world(), plan.schedule.context.parallel_shape());
  MemoryLedger ledger;
  Gpt2Model model(plan.rank_model,
                  {.micro_batch = setup.micro_batch,
                   .seq_len = setup.seq_len,
                   .activation_element_bytes = plan.request.config.precision.param_bytes()},
                  ledger);
  ZeroEngine engine(plan, groups, model, ledger,
                    {.inject_inf = {{.step = 1, .rank = 3, .tensor = tensor, .element = 5}}});
  std::vector<bool> skipped;
  for (int step = 0; step < 3; ++step) skipped.push_back(engine.step(step).skipped);
  EXPECT_EQ(skipped, (std::vector<bool>{false, true, false})) << specs[std::size_t(tensor)]->name;
}

// 2 nodes of 4: both hops with 4-rank node groups.
TEST(ZeroPlusPlus, QuantizedCollectivesFollowZero3OnEightRanks) {
  if (world().size() != 8) GTEST_SKIP() << "the 8-rank variant needs 8 ranks";
  expect_follows_zero3({zeropp(true, true, 4, Precision::Fp32)});
}

}  // namespace
}  // namespace zerolens::exec
