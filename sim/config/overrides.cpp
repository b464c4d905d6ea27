// The one way from options to a config: the typed fields set directly (with the checks and key
// names their DeepSpeed keys have), then --set keys read onto the result by the DeepSpeed reader.
#include "sim/config/overrides.hpp"

#include <initializer_list>

#include <nlohmann/json.hpp>

#include "sim/config/colossalai.hpp"
#include "sim/config/deepspeed.hpp"
#include "sim/core/json_read.hpp"

namespace zerolens {
namespace {

using nlohmann::json;

// A number given as a flag, checked (and named in errors) as the key it sets when read from a file.
std::int64_t checked_count(double value, const std::string& key, std::int64_t min,
                           std::int64_t max) {
  return json_read::as_int(json(value), key, min, max);
}

void set_elements(Elements& field, const std::optional<double>& value, const char* key,
                  Elements min = 0) {
  if (value)
    field = checked_count(*value, std::string("zero_optimization.") + key, min, kMaxConfigElements);
}

void apply_zero_sizes(ZeroConfig& z, const ConfigOverrides& o) {
  set_elements(z.reduce_bucket_size, o.reduce_bucket_size, "reduce_bucket_size");
  set_elements(z.allgather_bucket_size, o.allgather_bucket_size, "allgather_bucket_size");
  set_elements(z.stage3_prefetch_bucket_size, o.prefetch_bucket_size,
               "stage3_prefetch_bucket_size");
  set_elements(z.stage3_param_persistence_threshold, o.param_persistence_threshold,
               "stage3_param_persistence_threshold");
  set_elements(z.stage3_max_live_parameters, o.max_live_parameters, "stage3_max_live_parameters");
  set_elements(z.stage3_max_reuse_distance, o.max_reuse_distance, "stage3_max_reuse_distance");
  set_elements(z.sub_group_size, o.sub_group_size, "sub_group_size", 0);
}

// The GUI's controls: a new stage takes away the offloads it does not allow, unless they were
// chosen with it (then validate() names the conflict).
void settle_offloads(ZeroConfig& z, const ConfigOverrides& o) {
  if (o.stage && !o.offload_optimizer && !z.offload_allowed(OffloadKind::Optimizer)) {
    z.offload_optimizer.device = OffloadDevice::None;
  }
  if (o.stage && !o.offload_param && !z.offload_allowed(OffloadKind::Param)) {
    z.offload_param.device = OffloadDevice::None;
  }
  give_nvme_offload_a_path(z);
}

// FSDP and ColossalAI shard parameters (stage 3) and ColossalAI's ZeRO runs in fp16, unless the
// stage or precision is given with the framework (then validate() names a conflict).
void apply_framework(TrainingConfig& config, const ConfigOverrides& o) {
  if (o.framework) {
    config.framework = *o.framework;
    if ((config.is_fsdp() || config.is_colossalai()) && !o.stage) config.zero.stage = 3;
    if (config.is_colossalai() && !o.precision) config.precision.precision = Precision::Fp16;
  }
  if (o.reshard_after_forward) config.fsdp.reshard_after_forward = *o.reshard_after_forward;
  if (o.reduce_dtype) config.fsdp.reduce_dtype = *o.reduce_dtype;
  ColossalAiConfig& c = config.colossalai;
  if (o.shard_strategy) c.shard_strategy = *o.shard_strategy;
  if (o.placement) c.placement = *o.placement;
  if (o.reuse_fp16_shard) c.reuse_fp16_shard = *o.reuse_fp16_shard;
}

void apply_zero(ZeroConfig& z, const ConfigOverrides& o, OverridePolicy policy) {
  if (o.stage) z.stage = *o.stage;
  if (o.offload_optimizer) z.offload_optimizer.device = *o.offload_optimizer;
  if (o.offload_param) z.offload_param.device = *o.offload_param;
  for (OffloadConfig* block : {&z.offload_optimizer, &z.offload_param}) {
    if (o.nvme_path) block->nvme_path = *o.nvme_path;
    if (o.pin_memory) block->pin_memory = *o.pin_memory;
  }
  apply_zero_sizes(z, o);
  if (o.overlap_comm) z.overlap_comm = *o.overlap_comm;
  if (o.contiguous_gradients) z.contiguous_gradients = *o.contiguous_gradients;
  if (o.reduce_buffers_at) z.reduce_buffers_at_first_hook = *o.reduce_buffers_at == "first-hook";
  if (o.reduce_scatter) z.reduce_scatter = *o.reduce_scatter;
  if (o.delayed_param_update) z.delay_param_update = *o.delayed_param_update;
  if (o.delayed_param_update_warmup) {
    z.delay_param_update_warmup =
        json_read::as_int(json(*o.delayed_param_update_warmup),
                          "zero_optimization.delay_param_update_warmup", 0, std::int64_t(1) << 40);
  }
  if (policy == OverridePolicy::Interactive) settle_offloads(z, o);
}

std::int64_t checked_batch(std::int64_t value, const char* key) {
  return json_read::as_int(json(value), key, 1, kMaxConfigBatch);
}

void apply_batch(BatchConfig& b, const ConfigOverrides& o) {
  if ((o.micro_batch || o.grad_accum) && !o.train_batch) b.train_batch_size.reset();
  if (o.train_batch && !o.micro_batch && !o.grad_accum) b.micro_batch_per_gpu.reset();
  if (o.micro_batch)
    b.micro_batch_per_gpu = checked_batch(*o.micro_batch, "train_micro_batch_size_per_gpu");
  if (o.grad_accum)
    b.gradient_accumulation_steps = checked_batch(*o.grad_accum, "gradient_accumulation_steps");
  if (o.train_batch) b.train_batch_size = checked_batch(*o.train_batch, "train_batch_size");
  if (o.micro_batch_if_unset && !b.train_batch_size && !b.micro_batch_per_gpu) {
    b.micro_batch_per_gpu = *o.micro_batch_if_unset;
  }
}

void apply_checkpointing(ActivationCheckpointingConfig& a, const ConfigOverrides& o,
                         OverridePolicy policy) {
  if (o.activation_checkpointing && !*o.activation_checkpointing) {
    if (policy == OverridePolicy::Interactive) {
      a.enabled = false;
    } else {
      a = {};
    }
    return;
  }
  if (o.activation_checkpointing || o.cpu_checkpointing || o.partition_activations)
    a.enabled = true;
  if (o.cpu_checkpointing) a.cpu_checkpointing = *o.cpu_checkpointing;
  if (o.partition_activations) a.partition_activations = *o.partition_activations;
}

void apply_optimizer(OptimizerConfig& optimizer, const ConfigOverrides& o) {
  if (o.optimizer) {
    const OptimizerType type = parse_optimizer_type(*o.optimizer);
    optimizer.type =
        type == OptimizerType::Adam && optimizer.adam_w_mode ? OptimizerType::AdamW : type;
  }
  if (o.optimizer_kernel) optimizer.kernel = *o.optimizer_kernel;
  if (o.momentum)
    optimizer.momentum = json_read::as_double(json(*o.momentum), "optimizer.params.momentum");
}

// --set keys, read onto the config as the keys of a DeepSpeed file are read onto the defaults.
void apply_set(TrainingConfig& config, const std::vector<std::string>& set,
               Diagnostics& diagnostics, std::optional<std::int64_t> hidden_size) {
  if (set.empty()) return;
  json keys = json::object();
  for (const std::string& assignment : set) apply_override(keys, assignment);
  read_deepspeed_onto(keys, diagnostics, hidden_size, config);
}

void erase_path(json& document, std::initializer_list<const char*> path) {
  json* node = &document;
  const char* const* last = path.end() - 1;
  for (const char* const* key = path.begin(); key != last; ++key) {
    if (!node->is_object() || !node->contains(*key)) return;
    node = &(*node)[*key];
  }
  if (node->is_object()) node->erase(*last);
}

void drop_zero_keys(json& d, const ConfigOverrides& o) {
  const char* z = "zero_optimization";
  if (o.stage) erase_path(d, {z, "stage"});
  if (o.offload_optimizer) erase_path(d, {z, "offload_optimizer", "device"});
  if (o.offload_param) erase_path(d, {z, "offload_param", "device"});
  for (const char* block : {"offload_optimizer", "offload_param"}) {
    if (o.nvme_path) erase_path(d, {z, block, "nvme_path"});
    if (o.pin_memory) erase_path(d, {z, block, "pin_memory"});
  }
  // A size replaces its key and DeepSpeed's alias of it.
  const auto drop = [&](const std::optional<double>& value,
                        std::initializer_list<const char*> keys) {
    if (!value) return;
    for (const char* key : keys) erase_path(d, {z, key});
  };
  drop(o.reduce_bucket_size, {"reduce_bucket_size"});
  drop(o.allgather_bucket_size, {"allgather_bucket_size"});
  drop(o.prefetch_bucket_size, {"stage3_prefetch_bucket_size", "prefetch_bucket_size"});
  drop(o.param_persistence_threshold,
       {"stage3_param_persistence_threshold", "param_persistence_threshold"});
  drop(o.max_live_parameters, {"stage3_max_live_parameters", "max_live_parameters"});
  drop(o.max_reuse_distance, {"stage3_max_reuse_distance", "max_reuse_distance"});
  drop(o.sub_group_size, {"sub_group_size"});
  if (o.overlap_comm) erase_path(d, {z, "overlap_comm"});
  if (o.contiguous_gradients) erase_path(d, {z, "contiguous_gradients"});
  if (o.reduce_scatter) erase_path(d, {z, "reduce_scatter"});
  if (o.reduce_buffers_at) erase_path(d, {z, "reduce_buffers_at"});
  if (o.delayed_param_update) erase_path(d, {z, "delay_param_update"});
  if (o.delayed_param_update_warmup) erase_path(d, {z, "delay_param_update_warmup"});
  // ColossalAI's model_config arguments the flags replace.
  if (o.shard_strategy) erase_path(d, {"zero", "model_config", "shard_strategy"});
  if (o.placement) erase_path(d, {"zero", "model_config", "tensor_placement_policy"});
  if (o.reuse_fp16_shard) erase_path(d, {"zero", "model_config", "reuse_fp16_shard"});
}

void drop_other_keys(json& d, const ConfigOverrides& o) {
  if (o.micro_batch || (o.train_batch && !o.grad_accum))
    erase_path(d, {"train_micro_batch_size_per_gpu"});
  if (o.grad_accum) erase_path(d, {"gradient_accumulation_steps"});
  if (o.train_batch || o.micro_batch || o.grad_accum) erase_path(d, {"train_batch_size"});
  if (o.precision) {
    erase_path(d, {"fp16", "enabled"});
    erase_path(d, {"bf16", "enabled"});
    erase_path(d, {"bfloat16"});
  }
  if (o.optimizer) erase_path(d, {"optimizer", "type"});
  if (o.tensor_parallel) erase_path(d, {"tensor_parallel", "autotp_size"});
  if (o.sequence_parallel) erase_path(d, {"tensor_parallel", "sequence_parallel"});
  if (o.pipeline_parallel) erase_path(d, {"pipeline", "stages"});
  if (o.shard_group) erase_path(d, {"zero_optimization", "mics_shard_size"});
  if (o.hpz_partition_size) erase_path(d, {"zero_optimization", "zero_hpz_partition_size"});
  if (o.quantized_weights) erase_path(d, {"zero_optimization", "zero_quantized_weights"});
  if (o.quantized_gradients) erase_path(d, {"zero_optimization", "zero_quantized_gradients"});
  if (o.virtual_stages) erase_path(d, {"pipeline", "virtual_stages"});
  if (o.pipeline_schedule) erase_path(d, {"pipeline", "schedule"});
  if (o.expert_parallel) erase_path(d, {"moe", "ep_size"});
  if (o.capacity_factor) erase_path(d, {"moe", "capacity_factor"});
  if (o.min_capacity) erase_path(d, {"moe", "min_capacity"});
  if (o.momentum) erase_path(d, {"optimizer", "params", "momentum"});
  if (o.activation_checkpointing && !*o.activation_checkpointing) {
    erase_path(d, {"activation_checkpointing"});
  } else {
    if (o.cpu_checkpointing) erase_path(d, {"activation_checkpointing", "cpu_checkpointing"});
    if (o.partition_activations)
      erase_path(d, {"activation_checkpointing", "partition_activations"});
  }
}

// A virtual-stage count above 1 is the interleaved schedule unless another is named, and naming
// the interleaved schedule alone gives each stage 2 chunks.
void apply_pipeline(PipelineParallelism& pipeline, const ConfigOverrides& o) {
  if (o.pipeline_parallel) pipeline.size = *o.pipeline_parallel;
  if (o.virtual_stages) pipeline.virtual_stages = *o.virtual_stages;
  if (o.pipeline_schedule) pipeline.schedule = *o.pipeline_schedule;
  if (o.virtual_stages && *o.virtual_stages > 1 && !o.pipeline_schedule) {
    pipeline.schedule = PipelineSchedule::Interleaved;
  }
  if (o.pipeline_schedule == PipelineSchedule::Interleaved && !o.virtual_stages &&
      pipeline.virtual_stages == 1) {
    pipeline.virtual_stages = 2;
  }
}

// Whether the document names a batch size, "auto" (left to the HF Trainer) included.
bool names_batch_size(const json& document) {
  return document.is_object() && (document.contains("train_batch_size") ||
                                  document.contains("train_micro_batch_size_per_gpu"));
}

}  // namespace

void apply_overrides(TrainingConfig& config, const ConfigOverrides& overrides,
                     Diagnostics& diagnostics, std::optional<std::int64_t> hidden_size,
                     OverridePolicy policy) {
  apply_zero(config.zero, overrides, policy);
  apply_framework(config, overrides);
  if (overrides.precision) config.precision.precision = *overrides.precision;
  apply_batch(config.batch, overrides);
  apply_checkpointing(config.activation_checkpointing, overrides, policy);
  apply_optimizer(config.optimizer, overrides);
  if (overrides.tensor_parallel) config.tensor_parallel.size = *overrides.tensor_parallel;
  if (overrides.sequence_parallel)
    config.tensor_parallel.sequence_parallel = *overrides.sequence_parallel;
  // The GUI's TP box at 1 switches sequence parallelism off with it (the CLI names the conflict).
  if (policy == OverridePolicy::Interactive && !config.tensor_parallel.active()) {
    config.tensor_parallel.sequence_parallel = false;
  }
  apply_pipeline(config.pipeline, overrides);
  if (overrides.expert_parallel) config.expert_parallel.size = *overrides.expert_parallel;
  if (overrides.capacity_factor)
    config.expert_parallel.capacity_factor = *overrides.capacity_factor;
  if (overrides.min_capacity) config.expert_parallel.min_capacity = *overrides.min_capacity;
  if (overrides.shard_group) config.zero.shard_group_size = *overrides.shard_group;
  if (overrides.hpz_partition_size) config.zero.hpz_partition_size = *overrides.hpz_partition_size;
  if (overrides.quantized_weights) config.zero.quantized_weights = *overrides.quantized_weights;
  if (overrides.quantized_gradients)
    config.zero.quantized_gradients = *overrides.quantized_gradients;
  if (overrides.seq_len) {
    config.seq_len = *overrides.seq_len == 0 ? std::nullopt : std::optional(*overrides.seq_len);
  }
  if (overrides.target_seq_len) {
    config.target_seq_len =
        *overrides.target_seq_len == 0 ? std::nullopt : std::optional(*overrides.target_seq_len);
  }
  apply_set(config, overrides.set, diagnostics, hidden_size);
}

json without_overridden_keys(const json& document, const ConfigOverrides& overrides) {
  json kept = document;
  drop_zero_keys(kept, overrides);
  drop_other_keys(kept, overrides);
  return kept;
}

void give_nvme_offload_a_path(ZeroConfig& zero) {
  for (OffloadConfig* offload : {&zero.offload_optimizer, &zero.offload_param}) {
    if (offload->device == OffloadDevice::Nvme && offload->nvme_path.empty())
      offload->nvme_path = "/local_nvme";
  }
}

TrainingConfig parse_training_config(const json& document, Diagnostics& diagnostics,
                                     std::optional<std::int64_t> hidden_size,
                                     const ConfigOverrides& overrides) {
  const json kept = without_overridden_keys(document, overrides);
  TrainingConfig config;
  if (is_colossalai_document(kept)) {
    read_colossalai_onto(kept, diagnostics, config);
  } else {
    read_deepspeed_onto(kept, diagnostics, hidden_size, config);
  }
  ConfigOverrides applied = overrides;
  if (names_batch_size(kept)) applied.micro_batch_if_unset.reset();
  apply_overrides(config, applied, diagnostics, hidden_size);
  finish_training_config(config, diagnostics);
  return config;
}

TrainingConfig parse_training_config(const json& document, Diagnostics& diagnostics,
                                     std::optional<std::int64_t> hidden_size) {
  return parse_training_config(document, diagnostics, hidden_size, ConfigOverrides{});
}

}  // namespace zerolens
