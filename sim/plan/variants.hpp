#pragma once
// Planning views over many plans: DP vs ZeRO-1/2/3 vs offload variants side by side, and the
// largest model of a family that fits each variant.
#include <optional>
#include <string>
#include <vector>

#include "sim/plan/plan.hpp"

namespace zerolens {

struct Variant {
  std::string label;  // ZeroConfig::label(): "ZeRO-3 + opt:cpu + param:cpu"
  int stage = 0;
  OffloadDevice offload_optimizer = OffloadDevice::None;
  OffloadDevice offload_param = OffloadDevice::None;
  std::optional<bool> reshard_after_forward;  // FSDP variants: FULL_SHARD (true), SHARD_GRAD_OP
  std::optional<PlacementPolicy> placement;   // ColossalAI variants: tensor_placement_policy
  std::optional<ShardStrategy> shard_strategy;
};

// DP, ZeRO-1, ZeRO-2, ZeRO-3, then each offload variant DeepSpeed supports.
std::vector<Variant> standard_variants();
// The variants of the config's framework: DeepSpeed's above, FSDP's FULL_SHARD, SHARD_GRAD_OP
// and FULL_SHARD with CPUOffloadPolicy, or ColossalAI's placements cuda, cpu and auto with each
// shard strategy.
std::vector<Variant> variants_for(const TrainingConfig& config);
// Those of them `base`'s model can run (a 4-bit base is not offloaded).
std::vector<Variant> variants_for(const PlanRequest& base);
// The config with the variant's stage and offload devices (NVMe variants get nvme_path
// "/local_nvme" when the config has none, so they validate).
TrainingConfig apply_variant(TrainingConfig config, const Variant& variant);

struct VariantPlan {
  Variant variant;
  Plan plan;
};
// A variant the planner refuses for this job (DeepSpeed's pipeline engine runs stage 0 or 1 only,
// so under --pp the ZeRO-2/3 variants), with the planner's reason ("key: why").
struct LeftOutVariant {
  Variant variant;
  std::string reason;
};
struct VariantComparison {
  std::vector<VariantPlan> plans;
  std::vector<LeftOutVariant> left_out;
};
// Every variant of the job the planner accepts, in variants_for's order; those it refuses are left
// out with its reason. Throws the first variant's InputError when it refuses them all (the job
// itself is bad input).
VariantComparison compare_variants(const PlanRequest& base);

struct MaxModel {
  Variant variant;
  bool found = false;        // false: not even the smallest candidate fits
  std::string model_name;    // preset name or dense:<N>
  Elements parameter_count = 0;
  // What stops the next candidate (the smallest when none fits): the first device it overflows,
  // its peak and capacity in the plan's scope (GPU per rank; CPU and NVMe per node). Absent when
  // every candidate fits.
  struct Binding {
    std::string model_name;
    Device device = Device::Gpu;
    Bytes peak = 0, capacity = 0;
    bool allocator_out_of_memory = false;  // GPU: the caching allocator's replay ran out first
  };
  std::optional<Binding> binding;
};
struct MaxModelSearch {
  std::vector<MaxModel> variants;
  std::vector<LeftOutVariant> left_out;  // the variants the planner refuses, with its reason
};
// family: "dense" (binary search over dense:N to 3 significant digits), or a preset family
// "gpt2", "llama2", "llama3", "presets" (all presets). Throws InputError for an unknown family,
// or the first variant's when the planner refuses every variant.
MaxModelSearch find_max_models(const PlanRequest& base, const std::string& family);
std::vector<std::string> max_model_families();

}  // namespace zerolens
