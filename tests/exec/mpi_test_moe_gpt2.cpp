// The MoE GPT-2 (gpt2-tiny-moe: 4 GPT-2 MLP experts, top-2, in block 1) on the CPU executor under
// mpirun (ctest exec.mpi.np1/np2/np4):
//  - trained by the ZeRO engine over data parallelism (expert parallelism 1: the experts are
//    ordinary data-parallel tensors, every token's top-2 computed): the loss falls, and ZeRO
//    stages 1-3 follow stage 0's loss trajectory within the executor's parity tolerance (2e-4, as
//    tests/exec/mpi_test_gpt2.cpp holds dense GPT-2's stages);
//  - expert parallelism 2 (each rank of an EP pair holds 2 of the 4 experts, tokens exchanged by
//    a real all-to-all, capacity factor E / k = 2 so that no token drops) against EP 1 on the same
//    global batch (the pair's two micro-batches as one): the loss, every non-expert gradient
//    (summed over the pair) and each rank's experts' gradients agree within float rounding;
//  - the ZeRO engine with expert parallelism 2 (its EP group connected to the model, the experts'
//    ZeRO over the expert-data-parallel group): stages 1 and 2 follow stage 0 (a second code path:
//    all-reduces over both groups instead of reduce-scatters and gathers), the loss falls, and
//    stage 0's trajectory is EP 1's on the same global batch (within Adam's eps: 2.1e-6 measured).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "exec/comm/communicator.hpp"
#include "exec/comm/process_groups.hpp"
#include "exec/engine/zero_engine.hpp"
#include "exec/model/gpt2_model.hpp"
#include "gpt2_setup.hpp"
#include "moe_gpt2_support.hpp"

namespace zerolens::exec {
namespace {

Communicator& world() {
  static const std::unique_ptr<Communicator> communicator = make_mpi_communicator();
  return *communicator;
}

using testing::gpt2_plan;
using testing::Gpt2Setup;
using testing::initial_weights;
using testing::LayerTensors;
using testing::name_of;
using testing::run_micro_batch;
using testing::tiny_moe_gpt2;
using testing::zeros_like;

std::vector<double> train(const Gpt2Setup& s, int steps) {
  const Plan plan = gpt2_plan(s, world().size());
  MemoryLedger ledger;
  Gpt2Model model(plan.rank_model,  // with EP: this rank's share of the experts
                  {.micro_batch = s.micro_batch,
                   .seq_len = s.seq_len,
                   .checkpointing = s.checkpointing,
                   .activation_element_bytes = plan.request.config.precision.param_bytes(),
                   // ProcessGroups' EP groups are consecutive data-parallel ranks.
                   .expert_parallel_rank = world().rank() % s.expert_parallel},
                  ledger);
  ZeroEngine engine(plan, world(), model, ledger);
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) losses.push_back(engine.step(step).loss);
  return losses;
}

TEST(MoeGpt2Engine, EveryStageTrainsItOverDataParallelism) {
  constexpr int kSteps = 12;
  Gpt2Setup reference_setup{.micro_batch = 2, .grad_accumulation = 2, .moe = true};
  const std::vector<double> reference = train(reference_setup, kSteps);
  // Uniform guessing costs ln(256) = 5.545 nats; the permutation rule is learnable.
  EXPECT_NEAR(reference.front(), std::log(256.0), 0.15);
  EXPECT_LT(reference.back(), reference.front() - 0.5);
  for (const int stage : {1, 2, 3}) {
    Gpt2Setup setup = reference_setup;
    setup.stage = stage;
    setup.checkpointing = stage == 3;  // a recompute runs the MoE forward again
    SCOPED_TRACE(name_of(setup));
    const std::vector<double> losses = train(setup, kSteps);
    double largest = 0;
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_NEAR(losses[std::size_t(step)], reference[std::size_t(step)], 2e-4) << step;
      largest =
          std::max(largest, std::abs(losses[std::size_t(step)] - reference[std::size_t(step)]));
    }
    if (world().rank() == 0)
      std::printf("%s on %d ranks: %.6f .. %.6f, largest difference from stage 0 %.3g\n",
                  name_of(setup).c_str(), world().size(), losses.front(), losses.back(), largest);
  }
}

TEST(MoeGpt2ExpertParallel, ZeroStagesFollowStageZeroWithEpTwo) {
  const int n = world().size();
  if (n % 2 != 0) GTEST_SKIP() << "one rank: no expert-parallel pair";
  constexpr int kSteps = 8;
  for (const Precision precision : {Precision::Fp32, Precision::Bf16}) {
    Gpt2Setup reference_setup{.micro_batch = 2,
                              .grad_accumulation = 2,
                              .precision = precision,
                              .moe = true,
                              .expert_parallel = 2};
    const std::vector<double> reference = train(reference_setup, kSteps);
    EXPECT_LT(reference.back(), reference.front() - 0.3);
    if (precision == Precision::Fp32) {
      // EP 1 on the same global batch: the expert gradients are the same sums of every token's
      // contribution, but DeepSpeed averages them over the expert-data-parallel ranks only
      // (stage_1_and_2.py average_tensor), ep times EP 1's; Adam's update is invariant to that
      // scale but for eps (1e-8 against gradients of ~1e-3), so the trajectories agree closely.
      Gpt2Setup dense = reference_setup;
      dense.expert_parallel = 1;
      const std::vector<double> ep_one = train(dense, kSteps);
      double largest = 0;
      for (int step = 0; step < kSteps; ++step)
        largest =
            std::max(largest, std::abs(ep_one[std::size_t(step)] - reference[std::size_t(step)]));
      EXPECT_LE(largest, 2e-4);
      if (world().rank() == 0)
        std::printf(
            "ep 2 against ep 1 through the engine on %d ranks: largest loss difference %.3g\n", n,
            largest);
    }
    // bf16 rounds the exchanged activations and the stages' reductions differently.
    const double tolerance = precision == Precision::Fp32 ? 2e-4 : 2e-2;
    for (const int stage : {1, 2}) {
      Gpt2Setup setup = reference_setup;
      setup.stage = stage;
      SCOPED_TRACE(name_of(setup));
      const std::vector<double> losses = train(setup, kSteps);
      double largest = 0;
      for (int step = 0; step < kSteps; ++step) {
        const double difference =
            std::abs(losses[std::size_t(step)] - reference[std::size_t(step)]);
        EXPECT_LE(difference, tolerance) << step;
        largest = std::max(largest, difference);
      }
      if (world().rank() == 0)
        std::printf("%s on %d ranks: %.6f .. %.6f, largest difference from stage 0 %.3g\n",
                    name_of(setup).c_str(), n, losses.front(), losses.back(), largest);
    }
  }
}

TEST(MoeGpt2ExpertParallel, EpTwoComputesEpOnesGradients) {
  Communicator& comm = world();
  const int n = comm.size();
  if (n % 2 != 0) GTEST_SKIP() << "one rank: no expert-parallel pair";
  constexpr std::int64_t kBatch = 2, kSeq = 16;
  const ProcessGroups groups(comm, {.data = n}, 2);
  Communicator& pair = *groups.expert();
  const Model whole = tiny_moe_gpt2();
  const Model share =
      expert_parallel_shard(whole, {.size = 2, .capacity_factor = 2.0, .min_capacity = 0});
  MemoryLedger ledger;
  // EP 1: the pair's global batch (samples first .. first + 2 x kBatch - 1) on one model.
  const std::int64_t first = std::int64_t(comm.rank() / 2 * 2) * kBatch;
  Gpt2Model reference_model(whole, {.micro_batch = 2 * kBatch, .seq_len = kSeq}, ledger);
  LayerTensors reference_w = initial_weights(whole, reference_model);
  LayerTensors reference_g = zeros_like(whole);
  const double reference_loss =
      run_micro_batch(whole, reference_model, reference_w, &reference_g, first, 2 * kBatch);
  // EP 2: this rank's micro-batch, its 2 experts; each rank's mean loss is half the pair's.
  Gpt2Model model(
      share, {.micro_batch = kBatch, .seq_len = kSeq, .expert_parallel_rank = pair.rank()}, ledger);
  model.connect_expert_parallel(pair);
  LayerTensors w = initial_weights(share, model);
  LayerTensors g = zeros_like(share);
  const auto calls = pair.count(OpKind::AllToAll).calls;
  const double loss =
      run_micro_batch(share, model, w, &g, first + pair.rank() * kBatch, kBatch, 0.5f);
  // One MoE block: the dispatch and the return in forward, their gradients in backward.
  EXPECT_EQ(pair.count(OpKind::AllToAll).calls - calls, 4);
  const double pair_loss = pair.all_reduce_sum(0.5 * loss);
  EXPECT_NEAR(pair_loss, reference_loss, 1e-6 * reference_loss);
  double largest = 0;
  for (std::size_t l = 0; l < share.layers.size(); ++l) {
    for (std::size_t t = 0; t < g[l].size(); ++t) {
      const TensorSpec& spec = share.layers[l].params[t];
      // Local expert e's tensors are the whole model's expert (pair rank x 2 + e)'s.
      const std::size_t whole_t = spec.expert ? t + 4 * 2 * std::size_t(pair.rank()) : t;
      if (!spec.expert) pair.all_reduce_sum(g[l][t]);  // the pair's tokens' share of it
      const std::vector<float>& expected = reference_g[l][whole_t];
      ASSERT_EQ(g[l][t].size(), expected.size()) << spec.name;
      for (std::size_t i = 0; i < expected.size(); ++i) {
        ASSERT_NEAR(g[l][t][i], expected[i], 1e-7 + 1e-4 * std::abs(expected[i]))
            << spec.name << " [" << i << "]";
        largest = std::max(largest, double(std::abs(g[l][t][i] - expected[i])));
      }
    }
  }
  if (comm.rank() == 0)
    std::printf("ep 2 on %d ranks: loss %.9f (ep 1 %.9f), largest gradient difference %.3g\n", n,
                pair_loss, reference_loss, largest);
}

}  // namespace
}  // namespace zerolens::exec
