// Hybrid sharding (MiCS, --shard-group) and ZeRO++ hpZ (--hpz) in the CPU executor, under mpirun
// (ctest exec.parallel.np4 and np8; other rank counts skip). Both train gpt2-tiny at stage 3 over
// the same data-parallel ranks as plain ZeRO-3 does, on the same global batch.
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

// Stage 3 with two micro-steps: the second micro-step's gathers are hpZ's secondary ones, and the
// replicas' all-reduce sums gradients accumulated over both.
Gpt2Setup zero3(Precision precision) {
  return {
      .stage = 3, .micro_batch = 4, .seq_len = 32, .grad_accumulation = 2, .precision = precision};
}

double largest_loss_difference(const Trained& run, const Trained& reference) {
  double worst = 0;
  for (int step = 0; step < kSteps; ++step) {
    worst = std::max(worst,
                     std::abs(run.losses[std::size_t(step)] - reference.losses[std::size_t(step)]));
  }
  return worst;
}

// Shard groups of `shard` ranks, replicated over the others: the gradients are reduce-scattered
// within the shard group and all-reduced over the replicas, so they are the sums plain ZeRO-3
// reduce-scatters, added in another order. Losses within the executor's parity tolerances
// (tests/exec/mpi_test_gpt2.cpp: 2e-4 in fp32, 2e-3 in 16 bits), model states exactly the plan's,
// the peak within 3%. The replicas' all-reduce moves each element of this rank's partition once
// per step (the last micro-step's buckets cover every tensor): layout.owned x the gradient's bytes.
TEST(DataSubgroups, HybridShardingTrainsAsZero3) {
  const int ranks = world().size();
  if (ranks != 4 && ranks != 8) GTEST_SKIP() << "hybrid sharding runs on 4 and 8 ranks here";
  std::vector<std::pair<int, Precision>> variants = {{2, Precision::Fp32}, {2, Precision::Bf16}};
  if (ranks == 8) variants = {{2, Precision::Fp32}, {4, Precision::Fp32}};
  for (const auto& [shard, precision] : variants) {
    const Gpt2Setup reference = zero3(precision);
    Gpt2Setup hybrid = reference;
    hybrid.shard_group = shard;
    SCOPED_TRACE(name_of(hybrid));
    const Trained expected = train(gpt2_plan(reference, ranks), reference, kSteps);
    const Plan plan = gpt2_plan(hybrid, ranks);
    ASSERT_EQ(plan.schedule.context.replicas(), ranks / shard);
    const Trained run = train(plan, hybrid, kSteps);
    const double worst = largest_loss_difference(run, expected);
    EXPECT_LE(worst, precision == Precision::Fp32 ? 2e-4 : 2e-3);
    if (world().rank() == 0)
      std::printf(
          "[ parity   ] %s vs ZeRO-3 on %d ranks: largest loss difference %.3g (per step: "
          "%s)\n",
          name_of(hybrid).c_str(), ranks, worst, loss_differences(run, expected).c_str());
    expect_memory_of(plan.schedule, run);
    const Bytes per_step = plan.schedule.layout.owned * plan.request.config.precision.grad_bytes();
    EXPECT_EQ(plan.comm.replicate[std::size_t(OpKind::AllReduce)].bytes, per_step);
    EXPECT_EQ(run.replicate_all_reduce.bytes, kSteps * per_step);
  }
}

// hpZ gathers copies of the same parameters (the secondary partition is a block of the gathered
// tensor, gathered back over the hpZ group), and reduces gradients as plain ZeRO-3 does: losses
// and parameters are bit for bit ZeRO-3's. Model states exactly the plan's (the secondary
// partition is a Params state), the peak within 3%, and the hpZ group gathered the bytes the
// plan's secondary gathers move.
TEST(DataSubgroups, HpzTrainsExactlyAsZero3) {
  if (!four_ranks()) GTEST_SKIP() << "hpZ 2 x 2 runs on 4 ranks";
  for (const Precision precision : {Precision::Fp32, Precision::Bf16}) {
    const Gpt2Setup reference = zero3(precision);
    Gpt2Setup hpz = reference;
    hpz.hpz = 2;
    SCOPED_TRACE(name_of(hpz));
    const Trained expected = train(gpt2_plan(reference, 4), reference, kSteps);
    const Plan plan = gpt2_plan(hpz, 4);
    ASSERT_EQ(plan.schedule.context.hpz_group, 2);
    const Trained run = train(plan, hpz, kSteps);
    EXPECT_EQ(run.losses, expected.losses);
    EXPECT_EQ(run.parameters, expected.parameters);
    if (world().rank() == 0)
      std::printf("[ parity   ] %s vs ZeRO-3: largest loss difference %.3g\n", name_of(hpz).c_str(),
                  largest_loss_difference(run, expected));
    expect_memory_of(plan.schedule, run);
    const Bytes per_step = plan.comm.secondary[std::size_t(OpKind::AllGather)].bytes;
    EXPECT_GT(per_step, 0);
    EXPECT_EQ(run.hpz_all_gather.bytes, kSteps * per_step);
  }
}

}  // namespace
}  // namespace zerolens::exec
