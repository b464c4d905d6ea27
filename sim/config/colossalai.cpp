// ColossalAI's `zero = dict(level, offload_optimizer_config, offload_param_config, ...)`: ZeRO
// always runs with fp16 (AMP_TYPE.NAIVE), dynamic loss scaling unless dynamic_loss_scale=False,
// and clip_grad as the gradient clipping norm. Other top-level keys are read as DeepSpeed keys.
// ColossalAI 0.1.x's `zero = dict(model_config=..., optimizer_config=...)`: the keyword arguments
// of ShardedModelV2 and ShardedOptimizerV2 (colossalai/zero/__init__.py convert_to_zero_v2, called
// by colossalai.initialize), read into the ColossalAI profile.
#include "sim/config/colossalai.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

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

// ShardedModelV2.__init__'s and ShardedOptimizerV2.__init__'s keyword arguments (v0.1.5):
// anything else raises TypeError in ColossalAI, so it is an error here.
const std::vector<std::string> kModelConfigKeys = {"shard_strategy",
                                                   "process_group",
                                                   "reduce_scatter_process_group",
                                                   "reduce_scatter_bucket_size_mb",
                                                   "fp32_reduce_scatter",
                                                   "tensor_placement_policy",
                                                   "gradient_predivide_factor",
                                                   "reuse_fp16_shard"};
const std::vector<std::string> kOptimizerConfigKeys = {
    "gpu_margin_mem_ratio", "initial_scale",    "min_scale",  "growth_factor",
    "backoff_factor",       "growth_interval",  "hysteresis", "max_scale",
    "dp_process_group",     "mp_process_group", "verbose"};

void refuse_unknown_keys(const json& object, const std::vector<std::string>& known,
                         const std::string& where, const char* callee) {
  for (const auto& item : object.items()) {
    if (std::find(known.begin(), known.end(), item.key()) != known.end()) continue;
    const std::string hint = closest_name(item.key(), known);
    throw InputError(join_key(where, item.key()),
                     std::string(callee) + " has no such argument (ColossalAI raises TypeError)" +
                         (hint.empty() ? std::string() : "; did you mean '" + hint + "'?"));
  }
}

void read_model_config(const json& block, ColossalAiConfig& c) {
  const std::string w = "zero.model_config";
  as_object(block, w);
  refuse_unknown_keys(block, kModelConfigKeys, w, "ShardedModelV2");
  const json* strategy = member(block, "shard_strategy");
  if (!strategy) {
    throw InputError(join_key(w, "shard_strategy"),
                     "missing: ShardedModelV2 needs a shard strategy (TensorShardStrategy or "
                     "BucketTensorShardStrategy)");
  }
  c.shard_strategy = parse_shard_strategy(as_string(*strategy, join_key(w, "shard_strategy")),
                                          join_key(w, "shard_strategy"));
  if (const json* v = member(block, "tensor_placement_policy")) {
    const std::string key = join_key(w, "tensor_placement_policy");
    c.placement = parse_placement_policy(as_string(*v, key), key);
  }
  if (const json* v = member(block, "reuse_fp16_shard"))
    c.reuse_fp16_shard = as_bool(*v, join_key(w, "reuse_fp16_shard"));
  if (const json* v = member(block, "reduce_scatter_bucket_size_mb")) {
    // ReduceScatterBucketer: a size <= 0 disables bucketing (read as 0).
    const std::string key = join_key(w, "reduce_scatter_bucket_size_mb");
    const double mb = as_double(*v, key, -1e30, 1 << 30);
    c.reduce_scatter_bucket_size_mb = mb <= 0 ? 0 : as_int(*v, key, 1, 1 << 30);
  }
  if (const json* v = member(block, "fp32_reduce_scatter"))
    c.fp32_reduce_scatter = as_bool(*v, join_key(w, "fp32_reduce_scatter"));
  if (const json* v = member(block, "gradient_predivide_factor"); v && !v->is_null())
    as_double(*v, join_key(w, "gradient_predivide_factor"), 1e-12);
}

// DynamicGradScaler's arguments as DeepSpeed's fp16 block (ShardedOptimizerV2's default initial
// scale is 2^32).
json fp16_of_optimizer_config(const json& block, ColossalAiConfig& c) {
  const std::string w = "zero.optimizer_config";
  as_object(block, w);
  refuse_unknown_keys(block, kOptimizerConfigKeys, w, "ShardedOptimizerV2");
  json fp16 = {{"enabled", true}, {"initial_scale_power", 32}};
  if (const json* v = member(block, "gpu_margin_mem_ratio"))
    c.gpu_margin_mem_ratio = as_double(*v, join_key(w, "gpu_margin_mem_ratio"), 0, 1);
  if (const json* v = member(block, "initial_scale")) {
    const double scale = as_double(*v, join_key(w, "initial_scale"), 1);
    fp16["initial_scale_power"] = int(std::lround(std::log2(scale)));
  }
  if (const json* v = member(block, "min_scale"))
    fp16["min_loss_scale"] = as_double(*v, join_key(w, "min_scale"), 1e-30);
  if (const json* v = member(block, "growth_interval"))
    fp16["loss_scale_window"] = as_int(*v, join_key(w, "growth_interval"), 1, 1 << 30);
  if (const json* v = member(block, "hysteresis"))
    fp16["hysteresis"] = as_int(*v, join_key(w, "hysteresis"), 1, 1 << 30);
  for (const char* key : {"growth_factor", "backoff_factor", "max_scale"}) {
    if (const json* v = member(block, key)) as_double(*v, join_key(w, key), 1e-30);
  }
  return fp16;
}

// ColossalAI's optimizer = dict(type=HybridAdam, lr=..., ...) as DeepSpeed's optimizer block.
// HybridAdam and CPUAdam default to adamw_mode=True (hybrid_adam.py, cpu_adam.py).
json optimizer_of(const json& block) {
  as_object(block, "optimizer");
  json params = block;
  params.erase("type");
  std::string type = "HybridAdam";
  if (const json* v = member(block, "type")) type = as_string(*v, "optimizer.type");
  if (type == "HybridAdam" || type == "CPUAdam") {
    const json* mode = member(block, "adamw_mode");
    type = !mode || as_bool(*mode, "optimizer.adamw_mode") ? "AdamW" : "Adam";
    params.erase("adamw_mode");
  }
  params.erase("simd_log");
  params.erase("bias_correction");
  return {{"type", type}, {"params", params}};
}

// The top-level keys colossalai.initialize reads besides zero (v0.1.5 initialize.py).
json sharded_model_v2_as_deepspeed(const json& root, Diagnostics& diagnostics,
                                   ColossalAiConfig& c) {
  const json& zero = root.at("zero");
  warn_unknown_keys(zero, {"model_config", "optimizer_config"}, "zero", diagnostics);
  if (member(root, "fp16")) {
    throw InputError("fp16",
                     "cannot be set beside zero: ColossalAI's ZeRO runs its own fp16 (initialize "
                     "raises 'It is not allowed to set fp16 and zero configuration in your config "
                     "file at the same time')");
  }
  const json* model_config = member(zero, "model_config");
  if (!model_config)
    throw InputError("zero.model_config", "missing: ShardedModelV2 needs a shard_strategy");
  read_model_config(*model_config, c);
  json ds = {{"zero_optimization", {{"stage", 3}}}};
  const json* optimizer_config = member(zero, "optimizer_config");
  ds["fp16"] = fp16_of_optimizer_config(optimizer_config ? *optimizer_config : json::object(), c);
  if (const json* v = member(root, "optimizer")) ds["optimizer"] = optimizer_of(*v);
  if (const json* v = member(root, "gradient_accumulation"))
    ds["gradient_accumulation_steps"] = as_int(*v, "gradient_accumulation", 1, 1 << 30);
  if (const json* v = member(root, "clip_grad_norm"))
    ds["gradient_clipping"] = as_double(*v, "clip_grad_norm");
  for (const char* key : {"train_micro_batch_size_per_gpu", "train_batch_size"}) {
    if (const json* v = member(root, key)) ds[key] = *v;
  }
  warn_unknown_keys(root,
                    {"zero", "optimizer", "gradient_accumulation", "clip_grad_norm",
                     "train_micro_batch_size_per_gpu", "train_batch_size"},
                    "", diagnostics);
  return ds;
}

}  // namespace

bool is_colossalai_document(const json& document) {
  const json* zero = member(document, "zero");
  return zero && zero->is_object() &&
         (zero->contains("level") || is_sharded_model_v2_document(document));
}

bool is_sharded_model_v2_document(const json& document) {
  const json* zero = member(document, "zero");
  return zero && zero->is_object() && !zero->contains("level") &&
         (zero->contains("model_config") || zero->contains("optimizer_config"));
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

void read_colossalai_onto(const json& root, Diagnostics& diagnostics, TrainingConfig& config) {
  as_object(root, "config");
  if (!is_sharded_model_v2_document(root)) {
    read_deepspeed_onto(colossalai_as_deepspeed(root, diagnostics), diagnostics, std::nullopt,
                        config);
    return;
  }
  ColossalAiConfig colossalai;
  const json ds = sharded_model_v2_as_deepspeed(root, diagnostics, colossalai);
  read_deepspeed_onto(ds, diagnostics, std::nullopt, config);
  config.framework = Framework::ColossalAi;
  config.colossalai = colossalai;
}

TrainingConfig parse_colossalai_config(const json& root, Diagnostics& diagnostics) {
  TrainingConfig config;
  read_colossalai_onto(root, diagnostics, config);
  finish_training_config(config, diagnostics);
  return config;
}

}  // namespace zerolens
