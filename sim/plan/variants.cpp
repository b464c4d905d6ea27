#include "sim/plan/variants.hpp"

#include <algorithm>
#include <cmath>
#include <exception>

#include "sim/config/overrides.hpp"
#include "sim/core/error.hpp"
#include "sim/model/lora.hpp"
#include "sim/model/presets.hpp"

namespace zerolens {
namespace {

// Labelled as the config names itself ("ZeRO-3 + opt:cpu + param:cpu").
Variant variant(int stage, OffloadDevice optimizer = OffloadDevice::None,
                OffloadDevice param = OffloadDevice::None) {
  ZeroConfig zero;
  zero.stage = stage;
  zero.offload_optimizer.device = optimizer;
  zero.offload_param.device = param;
  return {zero.label(), stage, optimizer, param, std::nullopt, std::nullopt, std::nullopt};
}

Plan plan_with(const PlanRequest& base, const Variant& v, Model model) {
  PlanRequest request = base;
  request.model = std::move(model);
  request.config = apply_variant(base.config, v);
  return make_plan(std::move(request));
}

bool fits_with(const PlanRequest& base, const Variant& v, Model model) {
  return plan_with(base, v, std::move(model)).fits();
}

// The first device (GPU, CPU, NVMe) the candidate overflows.
MaxModel::Binding binding_of(const PlanRequest& base, const Variant& v, const Model& model) {
  const Plan plan = plan_with(base, v, model);
  MaxModel::Binding binding{.model_name = model.name};
  for (const DeviceReport& device : plan.devices) {
    if (device.fits()) continue;
    binding.device = device.device;
    binding.peak = device.peak;
    binding.capacity = device.capacity;
    binding.allocator_out_of_memory = device.allocator_out_of_memory;
    break;
  }
  return binding;
}

// Candidates of a preset family, smallest first.
std::vector<std::string> family_presets(const std::string& family) {
  if (family == "gpt2") return {"gpt2-124m", "gpt2-355m", "gpt2-774m", "gpt2-1.5b"};
  if (family == "llama2") return {"llama2-7b", "llama2-13b", "llama2-70b"};
  if (family == "llama3") return {"llama3-8b", "llama3-70b"};
  if (family == "presets") return model_preset_names();
  throw InputError("max-model", "unknown family '" + family + "' (expected one of: dense, gpt2, llama2, llama3, presets)");
}

// Candidates are fine-tuned as the base model is (LoRA's rank, targets and base format).
Model candidate(const PlanRequest& base, const Model& model) {
  return fine_tuned_like(model, base.model);
}

MaxModel largest_preset(const PlanRequest& base, const Variant& v, std::vector<std::string> names) {
  std::vector<Model> models;
  for (const auto& name : names) models.push_back(candidate(base, model_from_preset(name)));
  std::sort(models.begin(), models.end(), [](const Model& a, const Model& b) {
    return a.parameter_count() < b.parameter_count();
  });
  MaxModel result{.variant = v};
  std::vector<bool> fits(models.size());
  for (std::size_t i = 0; i < models.size(); ++i) {
    fits[i] = fits_with(base, v, models[i]);
    if (!fits[i]) continue;
    result.found = true;
    result.model_name = models[i].name;
    result.parameter_count = models[i].parameter_count();
  }
  // What stops the smallest candidate above the answer.
  for (std::size_t i = 0; i < models.size(); ++i) {
    if (fits[i] || (result.found && models[i].parameter_count() <= result.parameter_count))
      continue;
    result.binding = binding_of(base, v, models[i]);
    break;
  }
  return result;
}

// Rounds down to three significant digits so the reported size itself fits.
double floor_three_digits(double value) {
  const double scale = std::pow(10.0, std::floor(std::log10(value)) - 2);
  return std::floor(value / scale) * scale;
}

MaxModel largest_dense(const PlanRequest& base, const Variant& v) {
  constexpr double kSmallest = 1e6, kLargest = 1e15;
  MaxModel result{.variant = v};
  const auto dense = [&](double count) { return candidate(base, model_from_dense(count)); };
  if (!fits_with(base, v, dense(kSmallest))) {
    result.binding = binding_of(base, v, dense(kSmallest));
    return result;
  }
  double low = kSmallest, high = kLargest;
  if (fits_with(base, v, dense(kLargest))) {
    low = kLargest;
  } else {
    while (high / low > 1.0005) {
      const double middle = std::round(std::sqrt(low * high));
      (fits_with(base, v, dense(middle)) ? low : high) = middle;
    }
  }
  const double reported = floor_three_digits(low);
  if (low < kLargest) result.binding = binding_of(base, v, dense(high));
  result.found = true;
  result.model_name = model_from_dense(reported).name;
  result.parameter_count = Elements(reported);
  return result;
}

}  // namespace

std::vector<Variant> standard_variants() {
  const auto cpu = OffloadDevice::Cpu, nvme = OffloadDevice::Nvme;
  return {variant(0),       variant(1),
          variant(2),       variant(3),
          variant(1, cpu),  variant(2, cpu),
          variant(3, cpu),  variant(3, cpu, cpu),
          variant(3, nvme), variant(3, nvme, nvme)};
}

std::vector<Variant> colossalai_variants() {
  std::vector<Variant> variants;
  for (const auto strategy : {ShardStrategy::Tensor, ShardStrategy::BucketTensor}) {
    for (const auto placement :
         {PlacementPolicy::Cuda, PlacementPolicy::Cpu, PlacementPolicy::Auto}) {
      const std::string name =
          strategy == ShardStrategy::Tensor ? "TensorShard" : "BucketTensorShard";
      variants.push_back({.label = name + " + " + to_string(placement),
                          .stage = 3,
                          .placement = placement,
                          .shard_strategy = strategy});
    }
  }
  return variants;
}

std::vector<Variant> variants_for(const TrainingConfig& config) {
  if (config.is_colossalai()) return colossalai_variants();
  if (!config.is_fsdp()) return standard_variants();
  const auto cpu = OffloadDevice::Cpu, none = OffloadDevice::None;
  return {{"FULL_SHARD", 3, none, none, true, std::nullopt, std::nullopt},
          {"SHARD_GRAD_OP", 3, none, none, false, std::nullopt, std::nullopt},
          {"FULL_SHARD + CPUOffload", 3, cpu, cpu, true, std::nullopt, std::nullopt}};
}

TrainingConfig apply_variant(TrainingConfig config, const Variant& v) {
  if (v.reshard_after_forward) config.fsdp.reshard_after_forward = *v.reshard_after_forward;
  if (v.placement) config.colossalai.placement = *v.placement;
  if (v.shard_strategy) config.colossalai.shard_strategy = *v.shard_strategy;
  config.zero.stage = v.stage;
  config.zero.offload_optimizer.device = v.offload_optimizer;
  config.zero.offload_param.device = v.offload_param;
  if (v.stage != 3) {  // ZeRO++ changes stage 3's collectives; DeepSpeed ignores it below
    config.zero.hpz_partition_size = 1;
    config.zero.quantized_weights = config.zero.quantized_gradients = false;
  }
  give_nvme_offload_a_path(config.zero);
  return config;
}

// The variants a model can run: a 4-bit base stays on the GPU (docs/memory-model.md).
std::vector<Variant> variants_for(const PlanRequest& base) {
  std::vector<Variant> variants = variants_for(base.config);
  if (has_quantized_weights(base.model)) {
    std::erase_if(variants,
                  [](const Variant& v) { return v.offload_param != OffloadDevice::None; });
  }
  return variants;
}

VariantComparison compare_variants(const PlanRequest& base) {
  VariantComparison comparison;
  std::exception_ptr first_refusal;
  for (const auto& v : variants_for(base)) {
    PlanRequest request = base;
    request.config = apply_variant(base.config, v);
    try {
      comparison.plans.push_back({v, make_plan(std::move(request))});
    } catch (const InputError& refused) {
      if (!first_refusal) first_refusal = std::current_exception();
      comparison.left_out.push_back({v, refused.what()});
    }
  }
  if (comparison.plans.empty() && first_refusal) std::rethrow_exception(first_refusal);
  return comparison;
}

std::vector<std::string> max_model_families() { return {"dense", "gpt2", "llama2", "llama3", "presets"}; }

MaxModelSearch find_max_models(const PlanRequest& base, const std::string& family) {
  MaxModelSearch search;
  const std::vector<std::string> presets =
      family == "dense" ? std::vector<std::string>{} : family_presets(family);
  std::exception_ptr first_refusal;
  for (const auto& v : variants_for(base)) {
    try {
      search.variants.push_back(family == "dense" ? largest_dense(base, v)
                                                  : largest_preset(base, v, presets));
    } catch (const InputError& refused) {
      if (!first_refusal) first_refusal = std::current_exception();
      search.left_out.push_back({v, refused.what()});
    }
  }
  if (search.variants.empty() && first_refusal) std::rethrow_exception(first_refusal);
  return search;
}

}  // namespace zerolens
