// The config written back in DeepSpeed's key names, and the ColossalAI translation.
#include <cmath>

#include <nlohmann/json.hpp>

#include "sim/config.hpp"
#include "sim/json_read.hpp"

namespace zerolens {
namespace {

using nlohmann::json;
using namespace json_read;

json offload_json(const OffloadConfig& o, bool param) {
  json block = {{"device", to_string(o.device)}, {"pin_memory", o.pin_memory}, {"buffer_count", o.buffer_count},
                {"fast_init", o.fast_init}};
  if (!o.nvme_path.empty()) block["nvme_path"] = o.nvme_path;
  if (param) {
    block["buffer_size"] = o.buffer_size;
    block["max_in_cpu"] = o.max_in_cpu;
  } else {
    block["pipeline_read"] = o.pipeline_read;
    block["pipeline_write"] = o.pipeline_write;
    block["ratio"] = o.ratio;
  }
  return block;
}

json zero_json(const ZeroConfig& z) {
  json zero = {{"stage", z.stage},
               {"offload_optimizer", offload_json(z.offload_optimizer, false)},
               {"offload_param", offload_json(z.offload_param, true)},
               {"allgather_partitions", z.allgather_partitions},
               {"allgather_bucket_size", z.allgather_bucket_size},
               {"reduce_scatter", z.reduce_scatter},
               {"reduce_bucket_size", z.reduce_bucket_size},
               {"contiguous_gradients", z.contiguous_gradients},
               {"stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size},
               {"stage3_param_persistence_threshold", z.stage3_param_persistence_threshold},
               {"stage3_model_persistence_threshold", z.stage3_model_persistence_threshold},
               {"stage3_max_live_parameters", z.stage3_max_live_parameters},
               {"stage3_max_reuse_distance", z.stage3_max_reuse_distance},
               {"sub_group_size", z.sub_group_size},
               {"round_robin_gradients", z.round_robin_gradients}};
  if (z.overlap_comm) zero["overlap_comm"] = *z.overlap_comm;
  return zero;
}

json optimizer_json(const OptimizerConfig& o) {
  json params = {{"lr", o.lr}, {"eps", o.eps}, {"weight_decay", o.weight_decay}, {"betas", {o.beta1, o.beta2}}};
  if (o.type == OptimizerType::Sgd) params = {{"lr", o.lr}, {"momentum", o.momentum}, {"weight_decay", o.weight_decay}};
  return {{"type", to_string(o.type)}, {"params", params}};
}

json precision_json(const PrecisionConfig& p) {
  const LossScaleConfig& ls = p.loss_scale;
  json out = {{"fp16", {{"enabled", p.precision == Precision::Fp16},
                        {"loss_scale", ls.static_loss_scale},
                        {"initial_scale_power", ls.initial_scale_power},
                        {"loss_scale_window", ls.loss_scale_window},
                        {"hysteresis", ls.hysteresis},
                        {"consecutive_hysteresis", ls.consecutive_hysteresis},
                        {"min_loss_scale", ls.min_loss_scale}}},
              {"bf16", {{"enabled", p.precision == Precision::Bf16}}}};
  if (p.fp32_grad_accumulation) out["data_types"] = {{"grad_accum_dtype", "fp32"}};
  return out;
}

}  // namespace

json to_deepspeed_json(const TrainingConfig& c) {
  json out = precision_json(c.precision);
  out["zero_optimization"] = zero_json(c.zero);
  out["optimizer"] = optimizer_json(c.optimizer);
  if (c.batch.train_batch_size) out["train_batch_size"] = *c.batch.train_batch_size;
  if (c.batch.micro_batch_per_gpu) out["train_micro_batch_size_per_gpu"] = *c.batch.micro_batch_per_gpu;
  if (c.batch.gradient_accumulation_steps) out["gradient_accumulation_steps"] = *c.batch.gradient_accumulation_steps;
  if (c.activation_checkpointing.enabled) {
    const auto& a = c.activation_checkpointing;
    out["activation_checkpointing"] = {{"partition_activations", a.partition_activations},
                                       {"cpu_checkpointing", a.cpu_checkpointing},
                                       {"contiguous_memory_optimization", a.contiguous_memory_optimization}};
    if (a.number_checkpoints) out["activation_checkpointing"]["number_checkpoints"] = *a.number_checkpoints;
  }
  out["gradient_clipping"] = c.gradient_clipping;
  out["prescale_gradients"] = c.prescale_gradients;
  out["gradient_predivide_factor"] = c.gradient_predivide_factor;
  return out;
}

// ColossalAI's `zero = dict(level, offload_optimizer_config, offload_param_config, ...)`: ZeRO
// always runs with fp16 (AMP_TYPE.NAIVE), dynamic loss scaling unless dynamic_loss_scale=False,
// and clip_grad as the gradient clipping norm. Other top-level keys are read as DeepSpeed keys.
TrainingConfig parse_colossalai_config(const json& root, Diagnostics& diagnostics) {
  as_object(root, "config");
  const json* zero = member(root, "zero");
  if (!zero) throw InputError("zero", "missing: a ColossalAI config needs zero = {\"level\": ...}");
  as_object(*zero, "zero");
  warn_unknown_keys(*zero, {"level", "offload_optimizer_config", "offload_param_config", "dynamic_loss_scale", "clip_grad",
                            "reduce_bucket_size", "overlap_communication", "initial_scale", "verbose"},
                    "zero", diagnostics);
  json ds = root;
  ds.erase("zero");
  const json* level = member(*zero, "level");
  if (!level) throw InputError("zero.level", "missing (1, 2 or 3)");
  json z = {{"stage", as_int(*level, "zero.level", 1, 3)}};
  for (const auto& [from, to] : {std::pair{"offload_optimizer_config", "offload_optimizer"},
                                 std::pair{"offload_param_config", "offload_param"}}) {
    const json* block = member(*zero, from);
    if (!block) continue;
    json copy = as_object(*block, std::string("zero.") + from);
    // The seed document writes fast_init=OFFLOAD_PARAM_MAX_IN_CPU for parameters: a count there
    // can only mean max_in_cpu.
    if (copy.contains("fast_init") && copy["fast_init"].is_number()) {
      diagnostics.warn(std::string("zero.") + from + ".fast_init", "is a number; read as max_in_cpu");
      copy["max_in_cpu"] = copy["fast_init"];
      copy.erase("fast_init");
    }
    z[to] = copy;
  }
  if (const json* v = member(*zero, "reduce_bucket_size")) z["reduce_bucket_size"] = *v;
  if (const json* v = member(*zero, "overlap_communication")) z["overlap_comm"] = *v;
  ds["zero_optimization"] = z;
  json fp16 = {{"enabled", true}};
  if (const json* v = member(*zero, "dynamic_loss_scale"); v && !as_bool(*v, "zero.dynamic_loss_scale")) {
    fp16["loss_scale"] = std::pow(2.0, 16);
  }
  if (const json* v = member(*zero, "initial_scale")) {
    const double scale = as_double(*v, "zero.initial_scale", 1);
    fp16["initial_scale_power"] = int(std::lround(std::log2(scale)));
  }
  ds["fp16"] = fp16;
  if (const json* v = member(*zero, "clip_grad")) ds["gradient_clipping"] = as_double(*v, "zero.clip_grad");
  if (!ds.contains("train_batch_size") && !ds.contains("train_micro_batch_size_per_gpu")) {
    ds["train_micro_batch_size_per_gpu"] = 1;
  }
  return parse_deepspeed_config(ds, diagnostics);
}

TrainingConfig parse_training_config(const json& root, Diagnostics& diagnostics, std::optional<std::int64_t> hidden_size) {
  const json* zero = member(root, "zero");
  if (zero && zero->is_object() && zero->contains("level")) return parse_colossalai_config(root, diagnostics);
  return parse_deepspeed_config(root, diagnostics, hidden_size);
}

}  // namespace zerolens
