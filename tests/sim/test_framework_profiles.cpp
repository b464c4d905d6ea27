// The GPU's three figures and the framework profiles, against figures worked by hand from the
// frameworks' mechanisms (docs/memory-model.md, "Framework profiles").
#include <gtest/gtest.h>

#include "sim/config/config.hpp"
#include "sim/plan/variants.hpp"
#include "sim/schedule/allocator_replay.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

constexpr std::size_t kGpu = std::size_t(Device::Gpu);

Bytes resident_on_gpu(const Plan& plan, Component component) {
  Bytes bytes = 0;
  for (const auto& effect : plan.schedule.resident) {
    if (effect.device == Device::Gpu && effect.component == component) bytes += effect.bytes;
  }
  return bytes;
}

TrainingConfig fsdp2_config(Precision reduce) {
  TrainingConfig config = testing::mixed_adam(3, Precision::Bf16);
  config.framework = Framework::Fsdp2;
  config.fsdp.reduce_dtype = reduce;
  return config;
}

// 4 layers of 1000 elements on 4 ranks: 250 elements of each tensor per rank.
TEST(FrameworkProfiles, Fsdp2KeepsFp32ShardsAndNoMasterCopy) {
  const Model model = testing::flat_model(4, 1000);
  const Plan fsdp = testing::plan_of(model, fsdp2_config(Precision::Fp32), 4);
  // fp32 shards (4 bytes), no master, Adam 8 bytes: 4 x 250 x (4 + 8) on the GPU at the start.
  EXPECT_EQ(resident_on_gpu(fsdp, Component::ParamsPartition), 4 * 250 * 4);
  EXPECT_EQ(resident_on_gpu(fsdp, Component::MasterPartition), 0);
  EXPECT_EQ(resident_on_gpu(fsdp, Component::OptimizerStatePartition), 4 * 250 * 8);
  // No flat reduce buffer and no gradient partition before the first reduce-scatter.
  EXPECT_EQ(resident_on_gpu(fsdp, Component::ReduceBucket), 0);
  EXPECT_EQ(resident_on_gpu(fsdp, Component::GradsPartition), 0);
  // DeepSpeed's stage 3 for the same job: bf16 partition, fp32 master, a resident bucket.
  const Plan deepspeed = testing::plan_of(model, testing::mixed_adam(3, Precision::Bf16), 4);
  EXPECT_EQ(resident_on_gpu(deepspeed, Component::ParamsPartition), 4 * 250 * 2);
  EXPECT_EQ(resident_on_gpu(deepspeed, Component::MasterPartition), 4 * 250 * 4);
  EXPECT_GT(resident_on_gpu(deepspeed, Component::ReduceBucket), 0);
}

TEST(FrameworkProfiles, Fsdp2ReduceScattersEachUnitInItsReduceDtype) {
  const Model model = testing::flat_model(4, 1000);
  for (const Precision reduce : {Precision::Fp32, Precision::Bf16}) {
    const Plan plan = testing::plan_of(model, fsdp2_config(reduce), 4);
    int scatters = 0;
    Bytes moved = 0;
    Bytes grads_allocated = 0;
    for (const Op& op : plan.schedule.ops) {
      if (op.kind != OpKind::ReduceScatter) continue;
      ++scatters;
      moved += op.bytes;
      for (const auto& effect : plan.schedule.effects_of(op)) {
        if (effect.component == Component::GradsPartition && effect.bytes > 0) grads_allocated += effect.bytes;
      }
    }
    EXPECT_EQ(scatters, 4);  // one per unit, none merged into a bucket
    EXPECT_EQ(moved, 4 * 1000 * (reduce == Precision::Fp32 ? 4 : 2));
    EXPECT_EQ(grads_allocated, 4 * 250 * 4);  // fp32 sharded gradients, made at the reduce-scatter
  }
}

TEST(FrameworkProfiles, Fsdp2RejectsWhatItCannotDo) {
  TrainingConfig config = fsdp2_config(Precision::Fp32);
  config.zero.stage = 2;
  EXPECT_THROW(config.validate(), InputError);
  config.zero.stage = 3;
  config.zero.offload_optimizer.device = OffloadDevice::Cpu;  // without the parameters
  EXPECT_THROW(config.validate(), InputError);
  EXPECT_THROW(parse_framework("megatron", "--framework"), InputError);
}

// FSDP's variants are its sharding strategies; SHARD_GRAD_OP keeps every unit's gathered
// parameters from its forward to its backward, so more are gathered at once than with FULL_SHARD,
// which frees a unit after its forward (the root excepted) and gathers it again.
TEST(FrameworkProfiles, FsdpVariantsAreItsShardingStrategies) {
  TrainingConfig config = fsdp2_config(Precision::Bf16);
  const auto variants = variants_for(config);
  ASSERT_EQ(variants.size(), 3u);
  EXPECT_EQ(variants[0].label, "FULL_SHARD");
  EXPECT_EQ(variants[1].label, "SHARD_GRAD_OP");
  EXPECT_EQ(variants[2].offload_param, OffloadDevice::Cpu);
  EXPECT_EQ(variants_for(testing::mixed_adam(0)).size(), standard_variants().size());
  const Model model = testing::flat_model(6, 1000);
  auto gathers_and_high = [&](const Variant& variant) {
    const Plan plan = testing::plan_of(model, apply_variant(config, variant), 4);
    int gathers = 0;
    for (const Op& op : plan.schedule.ops) gathers += op.kind == OpKind::AllGather;
    Bytes gathered_high = 0;
    for (const auto& state : replay_memory_components(plan.schedule)) {
      gathered_high = std::max(gathered_high, state[kGpu][std::size_t(Component::GatheredParams)]);
    }
    return std::pair(gathers, gathered_high);
  };
  const auto [full_gathers, full_high] = gathers_and_high(variants[0]);
  const auto [grad_op_gathers, grad_op_high] = gathers_and_high(variants[1]);
  EXPECT_EQ(grad_op_gathers, 6);   // once per unit
  EXPECT_EQ(full_gathers, 6 + 5);  // and again before each backward but the root's
  EXPECT_EQ(grad_op_high,
            6 * 1000 * 2);  // every unit in bf16 (the copy-in lives inside its all-gather)
  EXPECT_LT(full_high, grad_op_high);
}

// The three figures of a step: reserved at least allocated, device used = reserved plus what the
// allocator does not serve; a flat allocator with no allowance reserves exactly what is allocated.
TEST(GpuFigures, DeviceUsedIsReservedPlusContextAndWorkspaces) {
  const Model model = testing::small_transformer(2, 256);
  TrainingConfig config = testing::mixed_adam(3, Precision::Bf16);
  config.batch.micro_batch_per_gpu = 4;
  config.seq_len = 128;
  PlanRequest request;
  request.model = model;
  request.config = config;
  request.dp_size = 2;
  request.cluster = testing::test_cluster(8);
  const Plan caching = make_plan(request);
  EXPECT_GE(caching.gpu.reserved, caching.gpu.allocated);
  EXPECT_EQ(caching.gpu.outside_allocator, request.options.cuda_context_bytes + request.options.library_workspace_bytes);
  EXPECT_EQ(caching.gpu.device_used, caching.gpu.reserved + caching.gpu.outside_allocator);
  EXPECT_EQ(caching.device(Device::Gpu).peak, caching.gpu.device_used);
  EXPECT_EQ(caching.device(Device::Gpu).components[std::size_t(Component::Fragmentation)],
            caching.gpu.reserved - caching.gpu.allocated);
  request.options.allocator = AllocatorSpec{.kind = AllocatorKind::Flat};
  const Plan flat = make_plan(request);
  EXPECT_EQ(flat.gpu.allocated, caching.gpu.allocated);
  EXPECT_EQ(flat.gpu.reserved, flat.gpu.allocated);
  // The allocator's own count of the step's peak allocation is the replay's, up to what each live
  // block holds beyond its request: 512-byte rounding, or an unsplit remainder of at most 1 MiB.
  const AllocatorReplay replay = replay_allocator(caching.schedule);
  EXPECT_GE(replay.peak_allocated, caching.gpu.allocated);
  EXPECT_LT(replay.peak_allocated, caching.gpu.allocated + (Bytes{1} << 20) * 64);
}

// Every allocation a step makes on the GPU is freed by its end, so that the second step of the
// allocator's replay starts where the first did.
TEST(GpuFigures, AStepFreesWhatItAllocates) {
  const Model model = testing::small_transformer(2, 64);
  for (int stage = 0; stage <= 3; ++stage) {
    for (const Framework framework : {Framework::DeepSpeed, Framework::Fsdp2}) {
      if (framework != Framework::DeepSpeed && stage != 3) continue;
      TrainingConfig config = testing::mixed_adam(stage, Precision::Bf16);
      config.framework = framework;
      const Plan plan = testing::plan_of(model, config, 4);
      Bytes net = 0;
      for (const auto& effect : plan.schedule.effects) {
        if (effect.device == Device::Gpu) net += effect.bytes;
      }
      EXPECT_EQ(net, 0) << "stage " << stage << " " << to_string(framework);
    }
  }
}

// Initialisation, stage 3, 4 x 1000 bf16 elements on 16 ranks (63 elements of each tensor per
// rank). Moved whole: the model's 8000 bytes sit beside its bf16 partitions (4 x 63 x 2 = 504)
// until they are freed, before the optimizer's partitions come (master, Adam and the bf16 gradient
// partition: 4 x 63 x (4 + 8 + 2) = 3528, 4032 with the parameters) and its zeroed fp32 gradient
// (4 x 63 x 4 = 1008) comes and goes: the peak is 8504. Built partitioned, only the largest layer
// (2000 bytes) is ever whole: 2504, then 4032 + 1008 = 5040.
TEST(GpuFigures, InitialisationPeakWithAndWithoutZeroInit) {
  TrainingConfig config = testing::mixed_adam(3, Precision::Bf16);
  config.zero.contiguous_gradients = false;           // no flat reduce buffer at initialisation
  config.zero.stage3_param_persistence_threshold = 0;  // every tensor partitioned
  PlanRequest request;
  request.model = testing::flat_model(4, 1000);
  request.config = config;
  request.dp_size = 16;
  request.cluster = testing::test_cluster(8);
  request.cluster.nodes = 2;
  request.options.cuda_context_bytes = 0;
  request.options.library_workspace_bytes = 0;
  const Plan plan = make_plan(request);
  EXPECT_EQ(plan.gpu.initialization_allocated, 8504);
  EXPECT_EQ(plan.gpu.initialization_allocated_partitioned, 5040);
}

}  // namespace
}  // namespace zerolens
