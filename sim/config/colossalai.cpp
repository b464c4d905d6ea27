// ColossalAI's `zero = dict(level, offload_optimizer_config, offload_param_config, ...)`: ZeRO
// always runs with fp16 (AMP_TYPE.NAIVE), dynamic loss scaling unless dynamic_loss_scale=False,
// and clip_grad as the gradient clipping norm. Other top-level keys are read as DeepSpeed keys.
#include "sim/config/colossalai.hpp"

#include <cmath>

#include "sim/config/config.hpp"
#include "sim/config/deepspeed.hpp"
#include "sim/core/json_read.hpp"

namespace zerolens {
namespace {

using nlohmann::json;
using namespace json_read;

// zero.level, the offload blocks and the bucket keys as zero_optimization.
json zero_optimization_of(const json& zero, Diagnostics& diagnostics) {
  const json* level = member(zero, "level");
  if (!level) throw InputError("zero.level", "missing (1, 2 or 3)");
  json z = {{"stage", as_int(*level, "zero.level", 1, 3)}};
  for (const auto& [from, to] : {std::pair{"offload_optimizer_config", "offload_optimizer"},
                                 std::pair{"offload_param_config", "offload_param"}}) {
    const json* block = member(zero, from);
    if (!block) continue;
    json copy = as_object(*block, std::string("zero.") + from);
    // The seed document writes fast_init=OFFLOAD_PARAM_MAX_IN_CPU for parameters: a count there
    // can only mean max_in_cpu.
    if (copy.contains("fast_init") && copy["fast_init"].is_number()) {
      diagnostics.warn(std::string("zero.") + from + ".fast_init",
                       "is a number; read as max_in_cpu");
      copy["max_in_cpu"] = copy["fast_init"];
      copy.erase("fast_init");
    }
    z[to] = copy;
  }
  if (const json* v = member(zero, "reduce_bucket_size")) z["reduce_bucket_size"] = *v;
  if (const json* v = member(zero, "overlap_communication")) z["overlap_comm"] = *v;
  return z;
}

json fp16_of(const json& zero) {
  json fp16 = {{"enabled", true}};
  if (const json* v = member(zero, "dynamic_loss_scale");
      v && !as_bool(*v, "zero.dynamic_loss_scale")) {
    fp16["loss_scale"] = std::pow(2.0, 16);
  }
  if (const json* v = member(zero, "initial_scale")) {
    const double scale = as_double(*v, "zero.initial_scale", 1);
    fp16["initial_scale_power"] = int(std::lround(std::log2(scale)));
  }
  return fp16;
}

}  // namespace

bool is_colossalai_document(const json& document) {
  const json* zero = member(document, "zero");
  return zero && zero->is_object() && zero->contains("level");
}

json colossalai_as_deepspeed(const json& root, Diagnostics& diagnostics) {
  as_object(root, "config");
  const json* zero = member(root, "zero");
  if (!zero) throw InputError("zero", "missing: a ColossalAI config needs zero = {\"level\": ...}");
  as_object(*zero, "zero");
  warn_unknown_keys(
      *zero,
      {"level", "offload_optimizer_config", "offload_param_config", "dynamic_loss_scale",
       "clip_grad", "reduce_bucket_size", "overlap_communication", "initial_scale", "verbose"},
      "zero", diagnostics);
  json ds = root;
  ds.erase("zero");
  ds["zero_optimization"] = zero_optimization_of(*zero, diagnostics);
  ds["fp16"] = fp16_of(*zero);
  if (const json* v = member(*zero, "clip_grad"))
    ds["gradient_clipping"] = as_double(*v, "zero.clip_grad");
  if (!ds.contains("train_batch_size") && !ds.contains("train_micro_batch_size_per_gpu")) {
    ds["train_micro_batch_size_per_gpu"] = 1;
  }
  return ds;
}

TrainingConfig parse_colossalai_config(const json& root, Diagnostics& diagnostics) {
  return parse_deepspeed_config(colossalai_as_deepspeed(root, diagnostics), diagnostics);
}

}  // namespace zerolens
