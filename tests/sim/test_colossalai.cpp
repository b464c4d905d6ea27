// ColossalAI's ShardedModelV2 profile (seed 002): its config, its shard strategies' gathers and
// reductions, its placements, worked by hand from ColossalAI 0.1.5's source (docs/seeds.md).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sim/config/colossalai.hpp"
#include "sim/config/overrides.hpp"
#include "sim/schedule/colossalai.hpp"
#include "sim/schedule/memory_replay.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

using nlohmann::json;

constexpr std::size_t kGpu = std::size_t(Device::Gpu);
constexpr std::size_t kCpu = std::size_t(Device::Cpu);

// One nn.Linear(6, 6) with its bias: module "fc", weight 36 elements, bias 6.
Model linear_with_bias() {
  Model model;
  model.name = "fc";
  model.source = "test";
  Layer layer;
  layer.name = "fc";
  layer.params = {{"fc.weight", {6, 6}}, {"fc.bias", {6}}};
  model.layers.push_back(layer);
  return model;
}

TrainingConfig colossalai(ShardStrategy strategy, PlacementPolicy placement,
                          bool reuse_fp16_shard = false) {
  TrainingConfig config = testing::mixed_adam(3, Precision::Fp16);
  config.framework = Framework::ColossalAi;
  config.colossalai.shard_strategy = strategy;
  config.colossalai.placement = placement;
  config.colossalai.reuse_fp16_shard = reuse_fp16_shard;
  return config;
}

struct Gathers {
  int count = 0;
  Bytes bytes = 0;
  std::vector<Bytes> rise;  // the most GPU memory above the op's start while each gather runs
};

Gathers gathers_of(const Plan& plan) {
  const MemoryTimeline replay = replay_memory(plan.schedule, ReplayDetail::PerOp);
  Gathers g;
  for (std::size_t i = 0; i < plan.schedule.ops.size(); ++i) {
    const Op& op = plan.schedule.ops[i];
    if (op.kind != OpKind::AllGather) continue;
    ++g.count;
    g.bytes += op.bytes;
    const Bytes before = i == 0 ? replay.devices[kGpu].resident : replay.after_op[i - 1][kGpu];
    g.rise.push_back(replay.high_during_op[i][kGpu] - before);
  }
  return g;
}

std::vector<Bytes> reduce_scatters(const Plan& plan) {
  std::vector<Bytes> bytes;
  for (const Op& op : plan.schedule.ops) {
    if (op.kind == OpKind::ReduceScatter) bytes.push_back(op.bytes);
  }
  return bytes;
}

Bytes resident(const Plan& plan, Device device, Component component) {
  Bytes bytes = 0;
  for (const auto& effect : plan.schedule.resident) {
    if (effect.device == device && effect.component == component) bytes += effect.bytes;
  }
  return bytes;
}

// On 4 ranks get_shard gives each rank ceil(36 / 4) = 9 weight and ceil(6 / 4) = 2 bias elements
// (the last rank's bias shard is zero-padded: 6 = 2 + 2 + 2 + 0).
// TensorShardStrategy gathers each tensor alone into an N x shard buffer the tensor views:
//   weight 4 x 9 = 36 elements = 72 bytes, bias 4 x 2 = 8 elements = 16 bytes; each gather frees
//   the rank's shard (18 and 4 bytes), so it holds 72 and 16 bytes above its start at most.
// BucketTensorShardStrategy flattens the module's shards (9 + 2 = 11 elements) and gathers them
// once: 4 x 11 = 44 elements = 88 bytes; its N buffers (88 bytes) live until the torch.cat'ed
// tensors (88 bytes) exist: 176 bytes above its start.
// Forward and backward gather the layer once each: twice the above per step.
TEST(ColossalAi, ShardStrategiesGatherALayerWithABiasAsWorkedByHand) {
  const Model model = linear_with_bias();
  const Plan tensor =
      testing::plan_of(model, colossalai(ShardStrategy::Tensor, PlacementPolicy::Cuda), 4);
  const Gathers t = gathers_of(tensor);
  EXPECT_EQ(t.count, 4);
  EXPECT_EQ(t.bytes, 2 * (72 + 16));
  EXPECT_EQ(t.rise, (std::vector<Bytes>{72, 16, 72, 16}));

  const Plan bucket =
      testing::plan_of(model, colossalai(ShardStrategy::BucketTensor, PlacementPolicy::Cuda), 4);
  const Gathers b = gathers_of(bucket);
  EXPECT_EQ(b.count, 2);
  EXPECT_EQ(b.bytes, 2 * 88);
  EXPECT_EQ(b.rise, (std::vector<Bytes>{176, 176}));

  // The same bytes reach each rank: (N - 1) / N of the messages, 132 bytes a step.
  EXPECT_EQ(tensor.comm.of(OpKind::AllGather).traffic_bytes, 132);
  EXPECT_EQ(bucket.comm.of(OpKind::AllGather).traffic_bytes, 132);
}

// Both strategies reduce alike: chunk_and_pad gives the weight 9 and the bias 2 elements a rank,
// which fit one bucket row (25 MiB / 2 bytes / 4 ranks = 3,276,800 elements): one reduce-scatter
// of 4 x 11 fp16 elements = 88 bytes. _save_grad keeps the rank's shard in fp32: 11 x 4 = 44
// bytes on the GPU (placement cuda), beside the fp16 parameter shard (22 bytes), the fp32 master
// (44) and Adam's moments (88).
TEST(ColossalAi, GradientsAreReduceScatteredAndSavedInFp32) {
  const Plan plan = testing::plan_of(linear_with_bias(),
                                     colossalai(ShardStrategy::Tensor, PlacementPolicy::Cuda), 4);
  EXPECT_EQ(reduce_scatters(plan), (std::vector<Bytes>{88}));
  EXPECT_EQ(resident(plan, Device::Gpu, Component::ParamsPartition), 22);
  EXPECT_EQ(resident(plan, Device::Gpu, Component::MasterPartition), 44);
  EXPECT_EQ(resident(plan, Device::Gpu, Component::OptimizerStatePartition), 88);
  EXPECT_EQ(resident(plan, Device::Gpu, Component::GradsPartition), 0);
  Bytes saved = 0;
  for (const Op& op : plan.schedule.ops) {
    for (const auto& effect : plan.schedule.effects_of(op)) {
      if (effect.component == Component::GradsPartition && effect.bytes > 0 &&
          effect.device == Device::Gpu)
        saved += effect.bytes;
    }
  }
  EXPECT_EQ(saved, 44);
  // The bucket: 4 rows and an output row of 3,276,800 fp16 elements, for the backward only.
  EXPECT_EQ(colossalai_bucket_row_elements(25, 2, 4), 3'276'800);
}

// reuse_fp16_shard: the fp16 gradient shard (22 bytes) replaces the parameter shard (22 bytes)
// until the step, where it becomes the parameter again: no fp32 gradient (44 bytes) at all.
TEST(ColossalAi, ReuseFp16ShardKeepsTheGradientInThePlaceOfTheParameter) {
  const Model model = linear_with_bias();
  const Plan fp32 =
      testing::plan_of(model, colossalai(ShardStrategy::Tensor, PlacementPolicy::Cuda), 4);
  const Plan reuse =
      testing::plan_of(model, colossalai(ShardStrategy::Tensor, PlacementPolicy::Cuda, true), 4);
  const auto after_step = [](const Plan& plan) {
    const auto states = replay_memory_components(plan.schedule);
    // After the reduce-scatter's callbacks: the op after the last reduce-scatter.
    std::size_t last = 0;
    for (std::size_t i = 0; i < plan.schedule.ops.size(); ++i) {
      if (plan.schedule.ops[i].kind == OpKind::ReduceScatter) last = i;
    }
    return states[last + 1][kGpu];
  };
  const ComponentBytes a = after_step(fp32), b = after_step(reuse);
  EXPECT_EQ(a[std::size_t(Component::GradsPartition)], 44);
  EXPECT_EQ(a[std::size_t(Component::ParamsPartition)], 22);
  EXPECT_EQ(b[std::size_t(Component::GradsPartition)], 22);
  EXPECT_EQ(b[std::size_t(Component::ParamsPartition)], 0);
  // After the step both hold the parameter shard and no gradient.
  const auto end = replay_memory_components(reuse.schedule).back()[kGpu];
  EXPECT_EQ(end[std::size_t(Component::ParamsPartition)], 22);
  EXPECT_EQ(end[std::size_t(Component::GradsPartition)], 0);
}

// Placement "cpu": shards, master, moments and gradients in host memory. Each use moves the layer's
// shards (22 bytes) to the GPU and evicts them after: forward and backward, 44 bytes each way;
// the reduced fp16 gradient shards (22 bytes) cross to the host, which casts them to fp32 (44
// bytes). CPU Adam updates the shards in host memory: no copy back.
TEST(ColossalAi, CpuPlacementMovesShardsPerUseAndOffloadsGradients) {
  const Plan plan = testing::plan_of(linear_with_bias(),
                                     colossalai(ShardStrategy::Tensor, PlacementPolicy::Cpu), 4);
  EXPECT_EQ(resident(plan, Device::Cpu, Component::ParamsPartition), 22);
  EXPECT_EQ(resident(plan, Device::Gpu, Component::ParamsPartition), 0);
  EXPECT_EQ(resident(plan, Device::Cpu, Component::MasterPartition), 44);
  EXPECT_EQ(resident(plan, Device::Cpu, Component::OptimizerStatePartition), 88);
  Bytes h2d = 0, d2h = 0;
  for (const Op& op : plan.schedule.ops) {
    if (op.kind == OpKind::CopyH2D) h2d += op.bytes;
    if (op.kind == OpKind::CopyD2H) d2h += op.bytes;
  }
  EXPECT_EQ(h2d, 44);
  EXPECT_EQ(d2h, 44 + 22);
  const auto end = replay_memory_components(plan.schedule);
  Bytes host_grads = 0;
  for (const auto& state : end)
    host_grads = std::max(host_grads, state[kCpu][std::size_t(Component::GradsPartition)]);
  EXPECT_EQ(host_grads, 44);
  bool host_step = false;
  for (const Op& op : plan.schedule.ops)
    host_step = host_step || (op.kind == OpKind::OptimizerStep && op.stream == Stream::Cpu);
  EXPECT_TRUE(host_step);
}

// Two layers of one 50-element tensor, each keeping 100 bytes of activations (fp16), on one rank
// (a shard is the whole tensor: 100 bytes). Bucketing off: each gradient is reduced at once.
Model two_small_layers() {
  Model model;
  model.name = "two-small-layers";
  model.source = "test";
  for (int i = 0; i < 2; ++i) {
    Layer layer;
    layer.name = "layer" + std::to_string(i);
    layer.params.push_back({"layer" + std::to_string(i) + ".w", {50}});
    layer.activations.elements = 50;
    model.layers.push_back(layer);
  }
  return model;
}

Plan gemini_plan(Bytes gpu_memory) {
  PlanRequest request;
  request.model = two_small_layers();
  request.config = colossalai(ShardStrategy::Tensor, PlacementPolicy::Auto);
  request.config.colossalai.reduce_scatter_bucket_size_mb = 0;
  request.cluster = testing::test_cluster(1, gpu_memory);
  request.cluster.nodes = 1;
  request.dp_size = 1;
  request.options.cuda_context_bytes = request.options.library_workspace_bytes = 0;
  request.options.allocator = {.kind = AllocatorKind::Flat};
  return make_plan(request);
}

// Gemini by hand. The GPU holds the shards t0, t1 (100 bytes each) and the activations; a gather
// replaces a shard by the gathered tensor (+100 -100), the post hook makes a new shard first
// (+100 then -100); a backward adds the gradient (+100) and its hook's clone, torch.cat and output
// (3 x 100) at once. With every shard on the GPU the step peaks in layer 1's backward: 200 shards
// + 200 activations + 100 gradient + 300 hook = 800 bytes.
// The warm-up step's non-model peaks (peak allocated in the period less the shards when it began,
// 200): F0 400 - 200 = 200, F1 500 - 200 = 300, B1 800 - 200 = 600, B0 700 - 200 = 500.
// Capacity 780. Warm-up (model data may use 0.2 x 780 = 156, evicting in registration order):
//   F0: 200 held, 156 allowed: evict t1 (room 44 short); F1: fetch t1 (room 56 < 100): evict t0;
//   B1: t1 there; B0: fetch t0: evict t1. Evicted 300 bytes, fetched 200; ends with {t0}.
// Steady (0.9 x 780 = 702 less the period's non-model bytes; farthest next use evicted first):
//   step 1 from {t0}: F1 has 402 - 100: fetch t1; B1 has 102 for 200 held: evict t0 (next used
//   in B0); B0 has 202 for t1: fetch t0. Ends with {t0, t1}; step 2 from {t0, t1} does the same
//   (evict t0 at B1, fetch it at B0) and ends as it began: 100 bytes each way a step. Its peak is
//   layer 1's backward without t0: 700 bytes <= 780, where 800 would not fit.
TEST(ColossalAi, GeminiFitsAModelOnlyByMovingShardsAsWorkedByHand) {
  const Plan plan = gemini_plan(780);
  const GeminiReport& g = plan.schedule.gemini;
  ASSERT_TRUE(g.active);
  EXPECT_EQ(g.failure, "");
  EXPECT_EQ(g.warmup_evicted, 300);
  EXPECT_EQ(g.warmup_fetched, 200);
  EXPECT_EQ(g.steady_evicted, 100);
  EXPECT_EQ(g.steady_fetched, 100);
  EXPECT_EQ(plan.gpu.allocated, 700);
  EXPECT_TRUE(plan.fits());
  // The moves are host-device copies of layer 0's shard: out before layer 1's backward, back
  // before layer 0's.
  std::vector<std::pair<OpKind, int>> moves;
  for (const Op& op : plan.schedule.ops) {
    if ((op.kind == OpKind::CopyD2H || op.kind == OpKind::CopyH2D) && op.phase == Phase::Backward &&
        op.bucket < 0)
      moves.emplace_back(op.kind, op.layer);
  }
  EXPECT_EQ(moves,
            (std::vector<std::pair<OpKind, int>>{{OpKind::CopyD2H, 0}, {OpKind::CopyH2D, 0}}));

  // With room for everything nothing moves and the step peaks at 800 bytes.
  const Plan roomy = gemini_plan(10'000);
  EXPECT_EQ(roomy.schedule.gemini.steady_evicted, 0);
  EXPECT_EQ(roomy.gpu.allocated, 800);
  // At 750 bytes layer 1's backward has 0.9 x 750 - 600 = 75 bytes for its 100-byte shard: no
  // eviction makes room, and ColossalAI raises "Adjust layout failed!".
  const Plan tight = gemini_plan(750);
  EXPECT_NE(tight.schedule.gemini.failure.find("Adjust layout failed"), std::string::npos);
  EXPECT_FALSE(tight.fits());
}

// The seed's high-level config as JSON (zero = dict(model_config=..., optimizer_config=...)).
json seed_config() {
  return json::parse(R"({
    "zero": {
      "model_config": {"shard_strategy": "BucketTensorShardStrategy",
                       "reduce_scatter_bucket_size_mb": 25, "fp32_reduce_scatter": false,
                       "tensor_placement_policy": "cpu", "gradient_predivide_factor": 1.0,
                       "reuse_fp16_shard": true},
      "optimizer_config": {"gpu_margin_mem_ratio": 0.0, "initial_scale": 32, "min_scale": 1,
                           "growth_factor": 2, "backoff_factor": 0.5, "growth_interval": 1000,
                           "hysteresis": 2, "max_scale": 4294967296}
    },
    "optimizer": {"type": "HybridAdam", "lr": 0.001}
  })");
}

TEST(ColossalAi, ReadsTheSeedsHighLevelConfig) {
  Diagnostics diagnostics;
  const TrainingConfig config = parse_training_config(seed_config(), diagnostics);
  EXPECT_EQ(config.framework, Framework::ColossalAi);
  EXPECT_EQ(config.zero.stage, 3);
  EXPECT_EQ(config.precision.precision, Precision::Fp16);
  EXPECT_EQ(config.colossalai.shard_strategy, ShardStrategy::BucketTensor);
  EXPECT_EQ(config.colossalai.placement, PlacementPolicy::Cpu);
  EXPECT_TRUE(config.colossalai.reuse_fp16_shard);
  EXPECT_EQ(config.precision.loss_scale.initial_scale_power, 5);  // initial_scale = 2^5
  EXPECT_EQ(config.optimizer.type, OptimizerType::AdamW);         // HybridAdam's adamw_mode=True
  // The placement becomes the offload the builder plans; the config keeps DeepSpeed's blocks empty.
  EXPECT_EQ(config.effective_zero().offload_optimizer.device, OffloadDevice::Cpu);
  EXPECT_EQ(config.effective_zero().offload_param.device, OffloadDevice::Cpu);
  EXPECT_EQ(config.zero.offload_optimizer.device, OffloadDevice::None);
}

std::string error_of(const json& document, const ConfigOverrides& overrides = {}) {
  try {
    Diagnostics diagnostics;
    parse_training_config(document, diagnostics, std::nullopt, overrides);
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

TEST(ColossalAi, RefusesWhatColossalAiRefuses) {
  // reuse_fp16_shard with gradient accumulation: _save_grad's assertion.
  json accumulating = seed_config();
  accumulating["gradient_accumulation"] = 4;
  EXPECT_NE(error_of(accumulating)
                .find("zero.model_config.reuse_fp16_shard: cannot be used with "
                      "gradient accumulation"),
            std::string::npos)
      << error_of(accumulating);
  ConfigOverrides accumulate_flag;
  accumulate_flag.grad_accum = 2;
  EXPECT_NE(error_of(seed_config(), accumulate_flag).find("reuse_fp16_shard"), std::string::npos);
  // fp16 beside zero: colossalai.initialize's ConfigException.
  json with_fp16 = seed_config();
  with_fp16["fp16"] = {{"mode", "naive"}};
  EXPECT_EQ(error_of(with_fp16).rfind("fp16: cannot be set beside zero", 0), 0u);
  // ShardedModelV2's required shard strategy, and its keyword arguments.
  json no_strategy = seed_config();
  no_strategy["zero"]["model_config"].erase("shard_strategy");
  EXPECT_EQ(error_of(no_strategy).rfind("zero.model_config.shard_strategy: missing", 0), 0u);
  json typo = seed_config();
  typo["zero"]["model_config"]["reuse_fp16_shards"] = true;
  EXPECT_NE(error_of(typo).find("zero.model_config.reuse_fp16_shards: ShardedModelV2 has no such "
                                "argument (ColossalAI raises TypeError); did you mean "
                                "'reuse_fp16_shard'?"),
            std::string::npos)
      << error_of(typo);
  json placement = seed_config();
  placement["zero"]["model_config"]["tensor_placement_policy"] = "gpu";
  EXPECT_NE(error_of(placement).find("unknown tensor placement policy 'gpu'"), std::string::npos);
  json margin = seed_config();
  margin["zero"]["optimizer_config"]["gpu_margin_mem_ratio"] = 1.5;
  EXPECT_EQ(error_of(margin).rfind("zero.optimizer_config.gpu_margin_mem_ratio", 0), 0u);
  // DeepSpeed's offload blocks do not place ColossalAI's tensors.
  ConfigOverrides offload;
  offload.offload_optimizer = OffloadDevice::Cpu;
  EXPECT_NE(error_of(seed_config(), offload).find("tensor_placement_policy"), std::string::npos);
  // The level form stays DeepSpeed's.
  Diagnostics diagnostics;
  const TrainingConfig level =
      parse_training_config(json::parse(R"({"zero": {"level": 2}})"), diagnostics);
  EXPECT_EQ(level.framework, Framework::DeepSpeed);
  EXPECT_EQ(level.zero.stage, 2);
}

TEST(ColossalAi, FlagsSetTheProfile) {
  ConfigOverrides flags;
  flags.framework = Framework::ColossalAi;
  flags.placement = PlacementPolicy::Auto;
  flags.shard_strategy = ShardStrategy::BucketTensor;
  flags.micro_batch = 1;
  Diagnostics diagnostics;
  const TrainingConfig config =
      parse_training_config(json::object(), diagnostics, std::nullopt, flags);
  EXPECT_EQ(config.zero.stage, 3);
  EXPECT_EQ(config.precision.precision, Precision::Fp16);  // ColossalAI's ZeRO is fp16
  EXPECT_EQ(config.colossalai.placement, PlacementPolicy::Auto);
  // auto: the optimizer's fp32 shards on the host, the parameter shards on the GPU.
  EXPECT_EQ(config.effective_zero().offload_optimizer.device, OffloadDevice::Cpu);
  EXPECT_EQ(config.effective_zero().offload_param.device, OffloadDevice::None);
  EXPECT_THROW(parse_placement_policy("GPU", "--placement"), InputError);
  EXPECT_THROW(parse_shard_strategy("ZeroShard", "--shard-strategy"), InputError);
}

}  // namespace
}  // namespace zerolens
