// Pipeline parallelism in the CPU executor, with and without TP, under mpirun (ctest
// exec.parallel.np4: PP 2 x DP 2; exec.parallel.np8: TP 2 x PP 2 x DP 2, oversubscribed): a
// pipeline of gpt2-tiny's 2 blocks over 2 stages (1F1B over 4 micro-batches) trains as plain data
// parallelism over every rank trains it on the same global batch, each stage holds exactly the
// memory its schedule says, and every stage's (shard's) parameters are its slice of the whole
// model's, the last stage's copy of the tied word embeddings included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "parallel_support.hpp"

namespace zerolens::exec {
namespace {

using namespace testing;  // parallel_support.hpp

constexpr int kSteps = 4;

// Plain data parallelism over all `ranks` on the same samples: micro-step m of DP rank r takes
// samples (m x dp + r) x micro-batch onwards, so a micro-batch of 4 over DP 2 is 8 / ranks per
// rank.
Gpt2Setup reference_of(Gpt2Setup setup, int ranks) {
  setup.micro_batch = setup.micro_batch * 2 / ranks;
  setup.tensor_parallel = setup.pipeline_stages = setup.virtual_stages = 1;
  setup.sequence_parallel = false;
  setup.stage = 0;
  setup.checkpointing = false;
  return setup;
}

struct Layout {
  int tp = 1;
  bool sp = false;
};

// The layouts of `ranks` ranks: PP 2 x DP 2 on 4, TP 2 x PP 2 x DP 2 (with and without SP) on 8.
std::vector<Layout> layouts(int ranks) {
  if (ranks == 4) return {{1, false}};
  if (ranks == 8) return {{2, false}, {2, true}};
  return {};
}

Gpt2Setup pipeline_setup(const Layout& layout, int stage, Precision precision, bool checkpointing,
                         OptimizerType optimizer) {
  return {.stage = stage,
          .micro_batch = 4,
          .seq_len = 32,
          .grad_accumulation = 4,
          .checkpointing = checkpointing,
          .precision = precision,
          .tensor_parallel = layout.tp,
          .sequence_parallel = layout.sp,
          .pipeline_stages = 2,
          .optimizer = optimizer};
}

double worst_loss_difference(const Trained& run, const Trained& reference) {
  double worst = 0;
  for (std::size_t step = 0; step < run.losses.size(); ++step)
    worst = std::max(worst, std::abs(run.losses[step] - reference.losses[step]));
  return worst;
}

// Losses within the executor's parity tolerances (2e-4 in fp32, 2e-3 in 16 bits:
// tests/exec/mpi_test_gpt2.cpp), every stage's model states exactly its schedule's and its peak
// within 3%, at ZeRO stages 0 and 1 (DeepSpeed runs no other with a pipeline).
TEST(PipelineParallel, PipelineTrainsAsDataParallelism) {
  const int ranks = world().size();
  if (layouts(ranks).empty()) GTEST_SKIP() << "PP 2 x DP 2 on 4 ranks, TP 2 x PP 2 x DP 2 on 8";
  struct Variant {
    int stage;
    Precision precision;
    bool checkpointing;
  };
  const Variant variants[] = {
      {0, Precision::Fp32, false}, {1, Precision::Fp32, true}, {1, Precision::Bf16, false}};
  for (const Layout& layout : layouts(ranks)) {
    std::vector<Trained> references;
    for (const Precision precision : {Precision::Fp32, Precision::Bf16}) {
      Gpt2Setup reference =
          reference_of(pipeline_setup(layout, 0, precision, false, OptimizerType::AdamW), ranks);
      references.push_back(train(gpt2_plan(reference, ranks), reference, kSteps));
    }
    for (const Variant& v : variants) {
      // Under TP a block's backward holds h per token less than sim's backward working term
      // (seq(2h) + f/t + a s/t at once; the executor's widest moment is seq(2h) + f/t): on the
      // last stage's one block, recomputed, that is 3.05% of its peak (docs/executor.md), past
      // the 3% held here; checkpointing is held with PP alone and with TP alone (its parity test).
      if (v.checkpointing && layout.tp > 1) continue;
      const Gpt2Setup setup =
          pipeline_setup(layout, v.stage, v.precision, v.checkpointing, OptimizerType::AdamW);
      SCOPED_TRACE(name_of(setup));
      const Plan plan = gpt2_plan(setup, ranks);
      const Trained run = train(plan, setup, kSteps);
      const bool fp32 = v.precision == Precision::Fp32;
      const double worst = worst_loss_difference(run, references[fp32 ? 0 : 1]);
      EXPECT_LE(worst, fp32 ? 2e-4 : 2e-3);
      if (world().rank() == 0)
        std::printf("[ parity   ] %s: largest loss difference %.3g (per step: %s)\n",
                    name_of(setup).c_str(), worst,
                    loss_differences(run, references[fp32 ? 0 : 1]).c_str());
      const int stage = place_of_rank(world().rank(), plan.schedule.context.parallel_shape()).stage;
      expect_memory_of(rank_schedule(plan, stage), run);
    }
  }
}

// The interleaved 1F1B schedule (Megatron's virtual stages) at np 4: gpt2-tiny with 4 blocks over
// PP 2 x 2 chunks a stage (stage 0 runs blocks 0 and 2 and the embedding, stage 1 blocks 1 and 3
// and the head; an activation crosses the stages 3 times a micro-batch each way) x DP 2, 4
// micro-batches a step, trains as plain data parallelism over the 4 ranks on the same global
// batch: losses within the parity tolerances, each stage's model states exactly its schedule's.
TEST(PipelineParallel, InterleavedPipelineTrainsAsDataParallelism) {
  const int ranks = world().size();
  if (ranks != 4) GTEST_SKIP() << "PP 2 x 2 virtual stages x DP 2 on 4 ranks";
  for (const Precision precision : {Precision::Fp32, Precision::Bf16}) {
    Gpt2Setup setup = pipeline_setup({}, 1, precision, precision == Precision::Fp32,
                                     OptimizerType::AdamW);
    setup.virtual_stages = 2;
    setup.blocks = 4;
    SCOPED_TRACE(name_of(setup));
    Gpt2Setup reference_setup = reference_of(setup, ranks);
    reference_setup.checkpointing = false;
    const Trained reference = train(gpt2_plan(reference_setup, ranks), reference_setup, kSteps);
    const Plan plan = gpt2_plan(setup, ranks);
    ASSERT_EQ(plan.schedule.context.virtual_stages, 2);
    const bool fp32 = precision == Precision::Fp32;
    // Each stage holds 2 chunks and sends 3 messages a micro-batch (stage 0: chunks 0 and 2's
    // outputs, chunk 2's input gradient; stage 1: chunk 1's output, chunks 3 and 1's input
    // gradients), 12 a step, each b x s x h = 4 x 32 x 64 elements in the training dtype.
    const int stage = place_of_rank(world().rank(), plan.schedule.context.parallel_shape()).stage;
    EXPECT_EQ(rank_model(plan, stage).pipeline_chunks.size(), 2u);
    int sends = 0;
    for (const Op& op : rank_schedule(plan, stage).ops) {
      if (op.kind != OpKind::Send) continue;
      ++sends;
      EXPECT_EQ(op.bytes, 4 * 32 * 64 * (fp32 ? 4 : 2));
    }
    EXPECT_EQ(sends, 3 * 4);
    const Trained run = train(plan, setup, kSteps);
    const double worst = worst_loss_difference(run, reference);
    EXPECT_LE(worst, fp32 ? 2e-4 : 2e-3);
    if (world().rank() == 0)
      std::printf("[ parity   ] %s: largest loss difference %.3g (per step: %s)\n",
                  name_of(setup).c_str(), worst, loss_differences(run, reference).c_str());
    expect_memory_of(rank_schedule(plan, stage), run);
  }
}

// With SGD (momentum 0.9) every stage's parameters after the steps are its part of plain data
// parallelism's (its shard's slice under TP), the last stage's copy of wte equal to wte: within
// 1e-5 of each tensor's largest value in fp32 (tests/exec/parallel_test_tensor.cpp).
TEST(PipelineParallel, StagesUpdateAsTheirPartsOfDataParallelism) {
  const int ranks = world().size();
  if (layouts(ranks).empty()) GTEST_SKIP() << "PP 2 x DP 2 on 4 ranks, TP 2 x PP 2 x DP 2 on 8";
  for (const Layout& layout : layouts(ranks)) {
    const Gpt2Setup setup = pipeline_setup(layout, 1, Precision::Fp32, false, OptimizerType::Sgd);
    SCOPED_TRACE(name_of(setup));
    const Gpt2Setup reference_setup = reference_of(setup, ranks);
    const Trained reference = train(gpt2_plan(reference_setup, ranks), reference_setup, kSteps);
    const Plan plan = gpt2_plan(setup, ranks);
    const Trained run = train(plan, setup, kSteps);
    const RankPlace place = place_of_rank(world().rank(), plan.schedule.context.parallel_shape());
    const Model& stage_model = rank_model(plan, place.stage);
    const Model whole_model = tiny_gpt2();
    const auto whole = split_tensors(whole_model, reference.parameters);
    const auto mine = split_tensors(stage_model, run.parameters);
    const auto specs = tensors_of(stage_model);
    double worst = 0;
    for (std::size_t t = 0; t < specs.size(); ++t) {
      const std::vector<float> expected =
          slice(*specs[t], whole[whole_tensor(whole_model, *specs[t])], layout.tp, place.tensor);
      if (analytically_zero(*specs[t])) {
        EXPECT_LT(largest_magnitude(mine[t]), 1e-5) << specs[t]->name;
        continue;
      }
      const double difference = relative_difference(mine[t], expected);
      worst = std::max(worst, difference);
      EXPECT_LE(difference, 1e-5) << specs[t]->name;
    }
    EXPECT_LE(worst_loss_difference(run, reference), 2e-4);
    std::printf(
        "[ parity   ] SGD %s, rank %d (stage %d): largest relative parameter difference "
        "%.3g, loss %.3g\n",
        name_of(setup).c_str(), world().rank(), place.stage, worst,
        worst_loss_difference(run, reference));
  }
}

}  // namespace
}  // namespace zerolens::exec
