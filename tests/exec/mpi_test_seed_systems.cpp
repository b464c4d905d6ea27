// The seed systems under mpirun (1, 2, 4 ranks): ZeRO-Offload's delayed parameter update (seed 004)
// follows a float64 reference of the delayed update exactly and data parallelism within the
// staleness of one step; ColossalAI's ShardedModelV2 (seed 002) with either shard strategy and
// every placement follows data parallelism (stage 0) in fp16, moving the bytes its plan moves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine_variants.hpp"

namespace zerolens::exec {
namespace {

constexpr int kSteps = 20;
const testing::ToyShape kShape = testing::kVariantShape;

// The toy with module names (dense0.weight, dense0.bias), so a bucket strategy groups a layer's
// weight and bias as nn.Linear's.
Model named_toy() {
  Model model = testing::toy_sim_model(kShape);
  for (Layer& layer : model.layers) {
    for (TensorSpec& tensor : layer.params) tensor.name = layer.name + "." + tensor.name;
  }
  return model;
}

PlanRequest toy_request(int ranks) {
  PlanRequest request;
  request.model = named_toy();
  TrainingConfig& c = request.config;
  c.batch.micro_batch_per_gpu = 2;
  c.seq_len = 1;
  c.zero.reduce_bucket_size = 40;
  c.optimizer.type = OptimizerType::AdamW;
  c.optimizer.lr = 0.01;
  c.optimizer.weight_decay = 0.01;
  request.dp_size = ranks;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), ranks, 8);
  return request;
}

struct TrainedRun {
  std::vector<double> losses;
  std::vector<float> params;
  LinkBytes links;
};

TrainedRun train(const Plan& plan) {
  Communicator& comm = testing::world_communicator();
  testing::ToyLayerModel model(kShape);
  MemoryLedger ledger;
  ZeroEngine engine(plan, comm, model, ledger);
  TrainedRun run;
  for (int step = 0; step < kSteps; ++step) {
    const StepReport report = engine.step(step);
    EXPECT_FALSE(report.skipped) << "step " << step;
    run.losses.push_back(report.loss);
  }
  run.params = engine.full_parameters();
  run.links = engine.link_bytes();
  return run;
}

// ---- ZeRO-Offload's delayed parameter update --------------------------------------------------

Plan offload_plan(int ranks, bool delayed, std::int64_t warmup) {
  PlanRequest request = toy_request(ranks);
  TrainingConfig& c = request.config;
  c.zero.stage = 2;
  c.precision.precision = Precision::Fp32;
  c.zero.offload_optimizer.device = OffloadDevice::Cpu;
  c.zero.delay_param_update = delayed;
  c.zero.delay_param_update_warmup = warmup;
  return make_plan(request);
}

// float64, the whole global batch at once. A step before `warmup` updates with its own gradients;
// from `warmup` on, a step first applies the previous step's gradients (none at `warmup`), computes
// its own on the parameters written back before (one update behind), and writes the new ones back
// at its end. `warmup` past the last step is data parallelism.
std::vector<double> reference_losses(int ranks, std::int64_t warmup) {
  const int width = kShape.width, layers = kShape.layers;
  const std::size_t per_owner = std::size_t(width * width + width);
  std::vector<double> master(per_owner * std::size_t(layers - 1)), m(master.size()),
      v(master.size());
  for (int o = 0; o + 1 < layers; ++o) {
    for (int k = 0; k < width * width; ++k)
      master[std::size_t(o) * per_owner + std::size_t(k)] =
          double(float(testing::toy_init(2 * o, std::size_t(k))));
  }
  std::vector<double> device = master, pending;
  int updates = 0;
  const auto adam = [&](const std::vector<double>& grads) {
    ++updates;
    for (std::size_t i = 0; i < master.size(); ++i) {
      m[i] = 0.9 * m[i] + 0.1 * grads[i];
      v[i] = 0.999 * v[i] + 0.001 * grads[i] * grads[i];
      const double update = (m[i] / (1 - std::pow(0.9, updates))) /
                            (std::sqrt(v[i] / (1 - std::pow(0.999, updates))) + 1e-8);
      master[i] -= 0.01 * (update + 0.01 * master[i]);
    }
  };
  const std::int64_t global = 2 * ranks;
  testing::ToyMaths<double> maths{width, {}, {}, {}, {}};
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    const bool updated = step >= warmup && !pending.empty();
    if (updated) adam(pending);
    maths.load(step * global, global, layers);
    const auto owner = [&](int l) { return std::size_t(l + 1 == layers ? 0 : l) * per_owner; };
    for (int l = 0; l < layers; ++l)
      maths.forward(std::size_t(l), &device[owner(l)],
                    &device[owner(l) + std::size_t(width * width)], l + 1 == layers);
    losses.push_back(maths.loss(std::size_t(layers - 1)));
    std::vector<double> grads(master.size(), 0);
    for (int l = layers; l-- > 0;)
      maths.backward(std::size_t(l), &device[owner(l)], &grads[owner(l)],
                     &grads[owner(l) + std::size_t(width * width)], l + 1 == layers, 1.0);
    if (step < warmup) {
      adam(grads);
      device = master;
    } else {
      pending = grads;
      if (updated) device = master;
    }
  }
  return losses;
}

constexpr std::int64_t kWarmup = 5;

// The executor runs the delayed schedule (its CPU step first, the write-back last) and matches the
// float64 delayed reference as tightly as the non-delayed engine matches its own (fp32, sums in
// another order on 4 ranks: 2e-5 relative).
TEST(DelayedParameterUpdate, TheExecutorFollowsTheDelayedReference) {
  const int ranks = testing::world_communicator().size();
  const TrainedRun run = train(offload_plan(ranks, true, kWarmup));
  const std::vector<double> expected = reference_losses(ranks, kWarmup);
  for (int step = 0; step < kSteps; ++step) {
    const double loss = expected[std::size_t(step)];
    EXPECT_NEAR(run.losses[std::size_t(step)], loss, 2e-5 * loss + 1e-7) << "step " << step;
  }
  // The delayed run is not data parallelism: the reference without the delay differs after it.
  const std::vector<double> dp = reference_losses(ranks, kSteps);
  EXPECT_GT(std::abs(run.losses[kWarmup + 2] - dp[kWarmup + 2]), 1e-6);
}

// Seed 004: "applying DPU does not negatively impact model quality" (ZeRO-Offload, section 5.2,
// shows GPT-2 and BERT curves with and without it overlapping over thousands of steps, DPU from
// step 40). Twenty steps of the toy cannot show that; what they hold: up to the first delayed step
// the runs are the same steps (within the fp32 tolerance above); after it a delayed step computes
// on parameters one update behind data parallelism's, which on this task (at 2 ranks DP's mean loss
// falls 24% from the first 5 steps to the last 5, and a step's loss differs from the previous
// one's by up to a factor of 2) keeps the loss within 10% of DP's at every
// step, and so its mean loss over the last 5 steps (it learns as much as DP does, within that).
TEST(DelayedParameterUpdate, TheLossFollowsDataParallelismWithinTheStatedTolerance) {
  const int ranks = testing::world_communicator().size();
  const TrainedRun delayed = train(offload_plan(ranks, true, kWarmup));
  const TrainedRun dp = train(offload_plan(ranks, false, kWarmup));
  double worst = 0;
  for (int step = 0; step < kSteps; ++step) {
    const double reference = dp.losses[std::size_t(step)];
    const double loss = delayed.losses[std::size_t(step)];
    if (step <= kWarmup) {
      EXPECT_NEAR(loss, reference, 2e-5 * reference + 1e-7) << step;
      continue;
    }
    EXPECT_NEAR(loss, reference, 0.10 * reference) << "step " << step;
    worst = std::max(worst, std::abs(loss - reference) / reference);
  }
  const auto mean = [](const std::vector<double>& losses, int first) {
    double sum = 0;
    for (int step = first; step < first + 5; ++step) sum += losses[std::size_t(step)];
    return sum / 5;
  };
  EXPECT_NEAR(mean(delayed.losses, kSteps - 5), mean(dp.losses, kSteps - 5),
              0.10 * mean(dp.losses, kSteps - 5));
  std::printf(
      "DPU vs DP over %d steps (warm-up %lld, %d ranks): largest relative loss difference "
      "%.4f; mean loss of the last 5 steps %.6f (DPU) vs %.6f (DP)\n",
      kSteps, static_cast<long long>(kWarmup), ranks, worst, mean(delayed.losses, kSteps - 5),
      mean(dp.losses, kSteps - 5));
  // The same gradients cross to the host; the parameters cross back once less (the first delayed
  // step has no update to write back).
  EXPECT_EQ(delayed.links.pcie_d2h, dp.links.pcie_d2h);
  EXPECT_EQ(delayed.links.pcie_h2d + offload_plan(ranks, true, kWarmup).comm.links.pcie_h2d,
            dp.links.pcie_h2d);
}

// ---- ColossalAI's ShardedModelV2 ---------------------------------------------------------------

Plan colossalai_plan(int ranks, ShardStrategy strategy, PlacementPolicy placement, bool reuse,
                     Bytes gpu_memory = 0, std::int64_t bucket_mb = 1) {
  PlanRequest request = toy_request(ranks);
  TrainingConfig& c = request.config;
  c.framework = Framework::ColossalAi;
  c.zero.stage = 3;
  c.precision.precision = Precision::Fp16;
  c.precision.loss_scale.initial_scale_power = 8;  // the toy's gradients do not overflow
  c.colossalai = {.shard_strategy = strategy,
                  .placement = placement,
                  .reuse_fp16_shard = reuse,
                  .reduce_scatter_bucket_size_mb = bucket_mb};
  if (gpu_memory > 0) request.cluster.gpu.memory_bytes = gpu_memory;
  request.options.cuda_context_bytes = request.options.library_workspace_bytes = 0;
  request.options.allocator = {.kind = AllocatorKind::Flat};  // the executor's: one buffer each
  return make_plan(request);
}

Plan dp_fp16_plan(int ranks) {
  PlanRequest request = toy_request(ranks);
  request.config.precision.precision = Precision::Fp16;
  request.config.precision.loss_scale.initial_scale_power = 8;
  return make_plan(request);
}

// fp16 sums in another order than stage 0's (4 ranks; ColossalAI's buckets): within 2e-3
// relative, as the DeepSpeed stages are held to stage 0 (mpi_test_zero_precision.cpp).
double expect_follows(const TrainedRun& run, const TrainedRun& dp) {
  double worst = 0;
  for (int step = 0; step < kSteps; ++step) {
    const double expected = dp.losses[std::size_t(step)];
    EXPECT_NEAR(run.losses[std::size_t(step)], expected, 2e-3 * expected + 1e-7) << "step " << step;
    worst = std::max(worst, std::abs(run.losses[std::size_t(step)] - expected) / expected);
  }
  EXPECT_EQ(run.params.size(), dp.params.size());
  for (std::size_t i = 0; i < std::min(run.params.size(), dp.params.size()); ++i)
    EXPECT_NEAR(run.params[i], dp.params[i], 2e-3) << i;
  return worst;
}

TEST(ColossalAi, EveryStrategyAndPlacementFollowsDataParallelism) {
  const int ranks = testing::world_communicator().size();
  const TrainedRun dp = train(dp_fp16_plan(ranks));
  for (const auto strategy : {ShardStrategy::Tensor, ShardStrategy::BucketTensor}) {
    for (const auto placement :
         {PlacementPolicy::Cuda, PlacementPolicy::Cpu, PlacementPolicy::Auto}) {
      for (const bool reuse : {false, true}) {
        SCOPED_TRACE(std::string(to_string(strategy)) + " " + to_string(placement) +
                     (reuse ? " reuse_fp16_shard" : ""));
        const Plan plan = colossalai_plan(ranks, strategy, placement, reuse);
        const TrainedRun run = train(plan);
        std::printf(
            "ColossalAI %s %s%s vs DP over %d steps (%d ranks): largest relative loss "
            "difference %.3g\n",
            to_string(strategy), to_string(placement), reuse ? " reuse_fp16_shard" : "", kSteps,
            ranks, expect_follows(run, dp));
        if (placement != PlacementPolicy::Auto) {  // (Gemini's moves depend on where shards start)
          EXPECT_EQ(run.links.pcie_h2d, kSteps * plan.comm.links.pcie_h2d);
          EXPECT_EQ(run.links.pcie_d2h, kSteps * plan.comm.links.pcie_d2h);
        }
      }
    }
  }
}

// Gemini with a GPU small enough that it evicts shards every step: the moves run (the shards
// cross to the host and back) and the training is unchanged.
TEST(ColossalAi, GeminiMovesShardsAndTrainingIsUnchanged) {
  const int ranks = testing::world_communicator().size();
  const TrainedRun dp = train(dp_fp16_plan(ranks));
  // The smallest GPU the plan fits (bisected to 8 bytes): any smaller and the shards would not
  // fit, so Gemini moves some of them in its steady step. Without the 1 MiB reduce bucket the
  // toy's shards are a large part of its GPU memory (its non-model bytes are a few hundred).
  const auto plan_at = [&](Bytes memory) {
    return colossalai_plan(ranks, ShardStrategy::Tensor, PlacementPolicy::Auto, false, memory, 0);
  };
  Bytes fits = 4 * plan_at(0).gpu.allocated, fails = 0;
  while (fits - fails > 8) {
    const Bytes middle = (fits + fails) / 2;
    (plan_at(middle).fits() ? fits : fails) = middle;
  }
  const Plan plan = plan_at(fits);
  ASSERT_GT(plan.schedule.gemini.steady_evicted, 0) << "no capacity makes Gemini evict";
  const TrainedRun run = train(plan);
  std::printf(
      "Gemini on a %lld-byte GPU (%d ranks): %lld bytes of shards evicted a step; largest "
      "relative loss difference vs DP %.3g\n",
      static_cast<long long>(fits), ranks,
      static_cast<long long>(plan.schedule.gemini.steady_evicted), expect_follows(run, dp));
  EXPECT_GT(run.links.pcie_d2h, kSteps * plan.comm.links.pcie_d2h / 2);
}

}  // namespace
}  // namespace zerolens::exec
