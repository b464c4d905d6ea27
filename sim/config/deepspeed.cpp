// DeepSpeed config JSON: DeepSpeed's key names, aliases and defaults (runtime/config.py,
// runtime/zero/config.py, runtime/zero/offload_config.py). "auto" values are resolved the way the
// Hugging Face integration does (integrations/deepspeed.py).
#include "sim/config/deepspeed.hpp"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "sim/core/json_read.hpp"

namespace zerolens {
namespace {

using nlohmann::json;
using namespace json_read;

constexpr std::int64_t kMaxElements = kMaxConfigElements;

// Top-level keys DeepSpeed accepts; the ones zerolens does not model get one note
// (kUnmodelledKeys).
const std::vector<std::string> kTopLevelKeys = {"train_batch_size",
                                                "train_micro_batch_size_per_gpu",
                                                "gradient_accumulation_steps",
                                                "optimizer",
                                                "scheduler",
                                                "fp16",
                                                "bf16",
                                                "bfloat16",
                                                "amp",
                                                "zero_optimization",
                                                "activation_checkpointing",
                                                "gradient_clipping",
                                                "prescale_gradients",
                                                "gradient_predivide_factor",
                                                "steps_per_print",
                                                "wall_clock_breakdown",
                                                "dump_state",
                                                "zero_allow_untested_optimizer",
                                                "zero_force_ds_cpu_optimizer",
                                                "communication_data_type",
                                                "data_types",
                                                "flops_profiler",
                                                "tensorboard",
                                                "wandb",
                                                "csv_monitor",
                                                "comet",
                                                "comms_logger",
                                                "aio",
                                                "elasticity",
                                                "autotuning",
                                                "checkpoint",
                                                "sparse_attention",
                                                "curriculum_learning",
                                                "data_efficiency",
                                                "compression_training",
                                                "memory_breakdown",
                                                "sparse_gradients",
                                                "disable_allgather",
                                                "fp32_allreduce",
                                                "seq_parallel_communication_data_type",
                                                "timers",
                                                "pipeline",
                                                "nebula",
                                                "eigenvalue",
                                                "progressive_layer_drop",
                                                "quantize_training",
                                                "weight_quantization",
                                                "hybrid_engine",
                                                "graph_harvesting",
                                                "use_data_before_expert_parallelism",
                                                "compile",
                                                "torch_autocast",
                                                "dataloader_drop_last",
                                                "load_universal_checkpoint",
                                                "use_node_local_storage",
                                                "zero_optimization_stage",
                                                "tensor_parallel",
                                                "moe"};

const std::vector<std::string> kZeroKeys = {"stage",
                                            "allgather_partitions",
                                            "allgather_bucket_size",
                                            "overlap_comm",
                                            "reduce_scatter",
                                            "reduce_bucket_size",
                                            "contiguous_gradients",
                                            "offload_param",
                                            "offload_optimizer",
                                            "cpu_offload",
                                            "cpu_offload_params",
                                            "cpu_offload_use_pin_memory",
                                            "sub_group_size",
                                            "stage3_prefetch_bucket_size",
                                            "prefetch_bucket_size",
                                            "stage3_param_persistence_threshold",
                                            "param_persistence_threshold",
                                            "stage3_model_persistence_threshold",
                                            "model_persistence_threshold",
                                            "stage3_max_live_parameters",
                                            "max_live_parameters",
                                            "stage3_max_reuse_distance",
                                            "max_reuse_distance",
                                            "stage3_gather_16bit_weights_on_model_save",
                                            "stage3_gather_fp16_weights_on_model_save",
                                            "gather_16bit_weights_on_model_save",
                                            "round_robin_gradients",
                                            "elastic_checkpoint",
                                            "load_from_fp32_weights",
                                            "ignore_unused_parameters",
                                            "legacy_stage1",
                                            "zero_hpz_partition_size",
                                            "zero_quantized_weights",
                                            "zero_quantized_nontrainable_weights",
                                            "zero_quantized_gradients",
                                            "reduce_buffers_at",
                                            "delay_param_update",
                                            "delay_param_update_warmup",
                                            "mics_shard_size",
                                            "mics_hierarchical_params_gather",
                                            "memory_efficient_linear",
                                            "pipeline_loading_checkpoint",
                                            "override_module_apply",
                                            "use_multi_rank_bucket_allreduce",
                                            "log_trace_cache_warnings",
                                            "module_granularity_threshold",
                                            "use_all_reduce_for_fetch_params",
                                            "stage3_use_all_reduce_for_fetch_params",
                                            "zeropp_loco_param",
                                            "offload_optimizer_config"};

const std::vector<std::string> kOffloadKeys = {"device", "nvme_path", "pin_memory", "buffer_count", "buffer_size",
                                               "max_in_cpu", "pipeline_read", "pipeline_write", "pipeline",
                                               "fast_init", "ratio"};

// Keys DeepSpeed accepts whose effect zerolens does not predict: they change speed, numerics,
// logging or what a checkpoint holds, not a step's bytes or traffic (or, where they would, the
// mechanism is not modelled yet). One note lists the ones a config sets (docs/config.md).
struct UnmodelledKeys {
  const char* block;  // "" for the top level
  std::vector<std::string> keys;
};
const std::vector<UnmodelledKeys> kUnmodelledKeys = {
    {"",
     {"scheduler",
      "prescale_gradients",
      "gradient_predivide_factor",
      "steps_per_print",
      "wall_clock_breakdown",
      "dump_state",
      "zero_allow_untested_optimizer",
      "zero_force_ds_cpu_optimizer",
      "communication_data_type",
      "flops_profiler",
      "tensorboard",
      "wandb",
      "csv_monitor",
      "comet",
      "comms_logger",
      "aio",
      "elasticity",
      "autotuning",
      "checkpoint",
      "sparse_attention",
      "curriculum_learning",
      "data_efficiency",
      "compression_training",
      "memory_breakdown",
      "sparse_gradients",
      "disable_allgather",
      "fp32_allreduce",
      "seq_parallel_communication_data_type",
      "timers",
      "nebula",
      "eigenvalue",
      "progressive_layer_drop",
      "quantize_training",
      "weight_quantization",
      "hybrid_engine",
      "graph_harvesting",
      "use_data_before_expert_parallelism",
      "compile",
      "torch_autocast",
      "dataloader_drop_last",
      "load_universal_checkpoint",
      "use_node_local_storage",
      "zero_optimization_stage",
      "amp"}},
    {"zero_optimization",
     {"allgather_partitions",
      "round_robin_gradients",
      "cpu_offload_use_pin_memory",
      "stage3_gather_16bit_weights_on_model_save",
      "stage3_gather_fp16_weights_on_model_save",
      "gather_16bit_weights_on_model_save",
      "elastic_checkpoint",
      "load_from_fp32_weights",
      "ignore_unused_parameters",
      "legacy_stage1",
      "memory_efficient_linear",
      "pipeline_loading_checkpoint",
      "override_module_apply",
      "use_multi_rank_bucket_allreduce",
      "log_trace_cache_warnings",
      "module_granularity_threshold",
      "use_all_reduce_for_fetch_params",
      "stage3_use_all_reduce_for_fetch_params",
      "zeropp_loco_param",
      "offload_optimizer_config",
      "mics_hierarchical_params_gather"}},
    {"zero_optimization.offload_optimizer", {"pin_memory", "fast_init"}},
    {"zero_optimization.offload_param", {"pin_memory", "max_in_cpu", "fast_init"}},
    {"fp16", {"auto_cast", "fp16_master_weights_and_grads"}},
    {"bf16", {"immediate_grad_update", "check_grad_overflow"}},
    {"activation_checkpointing",
     {"contiguous_memory_optimization", "number_checkpoints", "synchronize_checkpoint_boundary",
      "profile"}},
};

// The object at a dotted path of `root`, or nullptr.
const json* block_at(const json& root, const std::string& path) {
  const json* node = &root;
  std::size_t start = 0;
  while (node && node->is_object() && start < path.size()) {
    const std::size_t dot = path.find('.', start);
    node = member(*node,
                  path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    start = dot == std::string::npos ? path.size() : dot + 1;
  }
  return node && node->is_object() ? node : nullptr;
}

// DeepSpeed's defaults of the unmodelled keys zerolens itself writes (deepspeed_json.cpp): a key
// set to its default changes nothing, so it gets no note.
bool is_deepspeed_default(const std::string& key, const json& value) {
  static const std::vector<std::pair<std::string, json>> defaults = {
      {"allgather_partitions", true},
      {"round_robin_gradients", false},
      {"pin_memory", false},
      {"fast_init", false},
      {"max_in_cpu", 1'000'000'000},
      {"prescale_gradients", false},
      {"gradient_predivide_factor", 1.0}};
  for (const auto& [name, fallback] : defaults) {
    if (name == key) return value == fallback;
  }
  return false;
}

void note_unmodelled_keys(const json& root, Diagnostics& diagnostics) {
  std::string listed;
  for (const UnmodelledKeys& block : kUnmodelledKeys) {
    const json* object = block_at(root, block.block);
    if (!object) continue;
    for (const std::string& key : block.keys) {
      const json* value = member(*object, key);
      if (!value || is_deepspeed_default(key, *value)) continue;
      listed += (listed.empty() ? "" : ", ") + join_key(block.block, key);
    }
  }
  if (listed.empty()) return;
  diagnostics.warn(
      "",
      "note: parsed, not modelled (zerolens does not predict their effect; docs/config.md "
      "says what each changes): " +
          listed);
}

struct Reader {
  const json& root;
  Diagnostics& diagnostics;
  std::optional<std::int64_t> hidden;

  bool is_auto(const json& value) const { return value.is_string() && value.get<std::string>() == "auto"; }

  // Element sizes: integers (5e8 spelled as a float is fine) or "auto" resolved from hidden_size.
  std::int64_t size(const json& value, const std::string& where, double auto_per_hidden_squared,
                    double auto_per_hidden = 0) const {
    if (!is_auto(value)) return as_int(value, where, 0, kMaxElements);
    if (!hidden) throw InputError(where, "\"auto\" needs the model's hidden size (use a transformer model)");
    const double h = double(*hidden);
    return std::int64_t(auto_per_hidden_squared * h * h + auto_per_hidden * h);
  }
};

void read_offload(const json& block, const std::string& where, OffloadConfig& offload, Diagnostics& diagnostics) {
  as_object(block, where);
  warn_unknown_keys(block, kOffloadKeys, where, diagnostics);
  if (const json* v = member(block, "device")) offload.device = parse_offload_device(as_string(*v, join_key(where, "device")), join_key(where, "device"));
  if (const json* v = member(block, "nvme_path")) offload.nvme_path = as_string(*v, join_key(where, "nvme_path"));
  if (const json* v = member(block, "pin_memory")) offload.pin_memory = as_bool(*v, join_key(where, "pin_memory"));
  if (const json* v = member(block, "buffer_count")) offload.buffer_count = int(as_int(*v, join_key(where, "buffer_count"), 1, 1 << 20));
  if (const json* v = member(block, "buffer_size")) offload.buffer_size = as_int(*v, join_key(where, "buffer_size"), 1, kMaxElements);
  if (const json* v = member(block, "max_in_cpu")) offload.max_in_cpu = as_int(*v, join_key(where, "max_in_cpu"), 0, kMaxElements);
  if (const json* v = member(block, "pipeline_read")) offload.pipeline_read = as_bool(*v, join_key(where, "pipeline_read"));
  if (const json* v = member(block, "pipeline_write")) offload.pipeline_write = as_bool(*v, join_key(where, "pipeline_write"));
  if (const json* v = member(block, "pipeline")) offload.pipeline_read = offload.pipeline_write = as_bool(*v, join_key(where, "pipeline"));
  if (const json* v = member(block, "fast_init")) offload.fast_init = as_bool(*v, join_key(where, "fast_init"));
  if (const json* v = member(block, "ratio")) offload.ratio = as_double(*v, join_key(where, "ratio"), 0, 1);
}

// A key and its DeepSpeed alias (the pydantic model accepts both spellings).
const json* either(const json& zero, const char* key, const char* alias, std::string& used) {
  if (const json* v = member(zero, key)) {
    used = key;
    return v;
  }
  used = alias;
  return member(zero, alias);
}

void read_zero_sizes(const json& zero, const Reader& r, ZeroConfig& z) {
  const std::string w = "zero_optimization";
  std::string used;
  if (const json* v = member(zero, "reduce_bucket_size")) z.reduce_bucket_size = r.size(*v, join_key(w, "reduce_bucket_size"), 1);
  if (const json* v = member(zero, "allgather_bucket_size")) z.allgather_bucket_size = r.size(*v, join_key(w, "allgather_bucket_size"), 1);
  if (const json* v = either(zero, "stage3_prefetch_bucket_size", "prefetch_bucket_size", used)) {
    z.stage3_prefetch_bucket_size = r.size(*v, join_key(w, used), 0.9);
  }
  if (const json* v = either(zero, "stage3_param_persistence_threshold", "param_persistence_threshold", used)) {
    z.stage3_param_persistence_threshold = r.size(*v, join_key(w, used), 0, 10);
  }
  if (const json* v = either(zero, "stage3_model_persistence_threshold", "model_persistence_threshold", used)) {
    z.stage3_model_persistence_threshold = as_int(*v, join_key(w, used), 0);
  }
  if (const json* v = either(zero, "stage3_max_live_parameters", "max_live_parameters", used)) {
    z.stage3_max_live_parameters = as_int(*v, join_key(w, used), 0, kMaxElements);
  }
  if (const json* v = either(zero, "stage3_max_reuse_distance", "max_reuse_distance", used)) {
    z.stage3_max_reuse_distance = as_int(*v, join_key(w, used), 0, kMaxElements);
  }
  if (const json* v = member(zero, "sub_group_size"))
    z.sub_group_size = as_int(*v, join_key(w, "sub_group_size"), 0, kMaxElements);
}

void warn_unmodelled_zero(const json& zero, Diagnostics& diagnostics) {
  const std::string w = "zero_optimization";
  const std::string key = join_key(w, "zero_quantized_nontrainable_weights");
  if (const json* v = member(zero, "zero_quantized_nontrainable_weights"); v && as_bool(*v, key)) {
    diagnostics.warn(
        key, "frozen weights' int8 secondary copies are not modelled (every parameter trains)");
  }
}

// ZeRO++ (DeepSpeed reads these keys only at stage 3: stage3.py, partition_parameters.py).
// A key left out keeps what the config had (--set reads a few keys onto a whole config).
void read_zeropp(const json& zero, const Reader& r, ZeroConfig& z) {
  const std::string w = "zero_optimization";
  ZeroConfig read = z;
  if (const json* v = member(zero, "zero_hpz_partition_size"))
    read.hpz_partition_size =
        std::max(1, int(as_int(*v, join_key(w, "zero_hpz_partition_size"), 0, 1 << 24)));
  if (const json* v = member(zero, "zero_quantized_weights"))
    read.quantized_weights = as_bool(*v, join_key(w, "zero_quantized_weights"));
  if (const json* v = member(zero, "zero_quantized_gradients"))
    read.quantized_gradients = as_bool(*v, join_key(w, "zero_quantized_gradients"));
  if (z.stage != 3 && read.zeropp()) {
    r.diagnostics.warn(join_key(w, read.hpz_partition_size > 1 ? "zero_hpz_partition_size"
                                   : read.quantized_weights    ? "zero_quantized_weights"
                                                               : "zero_quantized_gradients"),
                       "ZeRO++ is read at stage 3 only (DeepSpeed ignores it at stage " +
                           std::to_string(z.stage) + "); ignored");
    read = ZeroConfig{};
  }
  z.hpz_partition_size = read.hpz_partition_size;
  z.quantized_weights = read.quantized_weights;
  z.quantized_gradients = read.quantized_gradients;
}

void read_zero(const json& zero, const Reader& r, ZeroConfig& z) {
  const std::string w = "zero_optimization";
  as_object(zero, w);
  warn_unknown_keys(zero, kZeroKeys, w, r.diagnostics);
  warn_unmodelled_zero(zero, r.diagnostics);
  if (const json* v = member(zero, "stage")) z.stage = int(as_int(*v, join_key(w, "stage"), 0, 3));
  if (const json* v = member(zero, "cpu_offload"); v && as_bool(*v, join_key(w, "cpu_offload"))) {
    r.diagnostics.warn(join_key(w, "cpu_offload"), "deprecated; read as offload_optimizer.device = \"cpu\"");
    z.offload_optimizer.device = OffloadDevice::Cpu;
  }
  if (const json* v = member(zero, "cpu_offload_params"); v && as_bool(*v, join_key(w, "cpu_offload_params"))) {
    r.diagnostics.warn(join_key(w, "cpu_offload_params"), "deprecated; read as offload_param.device = \"cpu\"");
    z.offload_param.device = OffloadDevice::Cpu;
  }
  if (const json* v = member(zero, "offload_optimizer")) read_offload(*v, join_key(w, "offload_optimizer"), z.offload_optimizer, r.diagnostics);
  if (const json* v = member(zero, "offload_param")) read_offload(*v, join_key(w, "offload_param"), z.offload_param, r.diagnostics);
  if (const json* v = member(zero, "allgather_partitions")) z.allgather_partitions = as_bool(*v, join_key(w, "allgather_partitions"));
  if (const json* v = member(zero, "overlap_comm")) z.overlap_comm = as_bool(*v, join_key(w, "overlap_comm"));
  if (const json* v = member(zero, "reduce_scatter")) z.reduce_scatter = as_bool(*v, join_key(w, "reduce_scatter"));
  if (const json* v = member(zero, "contiguous_gradients")) z.contiguous_gradients = as_bool(*v, join_key(w, "contiguous_gradients"));
  if (const json* v = member(zero, "round_robin_gradients")) z.round_robin_gradients = as_bool(*v, join_key(w, "round_robin_gradients"));
  // zerolens's key (--reduce-buffers-at; not DeepSpeed's): a written config keeps the timing
  // planned.
  if (const json* v = member(zero, "reduce_buffers_at")) {
    const std::string key = join_key(w, "reduce_buffers_at");
    const std::string at = as_string(*v, key);
    if (at != "first-hook" && at != "backward")
      throw InputError(key, "must be \"first-hook\" or \"backward\", got \"" + at + "\"");
    z.reduce_buffers_at_first_hook = at == "first-hook";
  }
  // The DPU fork's key (zero/constants.py ZERO_OPTIMIZATION_DELAY_PARAM_UPDATE) and zerolens's
  // warm-up count (the fork starts after 20 steps: stage2.py step).
  if (const json* v = member(zero, "delay_param_update"))
    z.delay_param_update = as_bool(*v, join_key(w, "delay_param_update"));
  if (const json* v = member(zero, "delay_param_update_warmup")) {
    z.delay_param_update_warmup =
        as_int(*v, join_key(w, "delay_param_update_warmup"), 0, std::int64_t(1) << 40);
  }
  if (const json* v = member(zero, "mics_shard_size")) {
    const auto size = as_int(*v, join_key(w, "mics_shard_size"), -1, 1 << 24);
    z.shard_group_size = size > 0 ? int(size) : 0;
  }
  read_zeropp(zero, r, z);
  read_zero_sizes(zero, r, z);
}

// fp16.enabled / bf16.enabled may be "auto" (set by the HF Trainer from its own flags); without
// the key, whether the precision already was that format.
bool enabled_flag(const json& block, const std::string& where, Diagnostics& diagnostics,
                  bool otherwise) {
  const json* v = member(block, "enabled");
  if (!v) return otherwise;
  if (v->is_string() && v->get<std::string>() == "auto") {
    diagnostics.warn(join_key(where, "enabled"), "\"auto\" read as false (the Trainer decides); use --precision to choose");
    return false;
  }
  return as_bool(*v, join_key(where, "enabled"));
}

void read_precision(const json& root, Diagnostics& diagnostics, PrecisionConfig& p) {
  const json* fp16 = member(root, "fp16");
  const json* bf16 = member(root, "bf16");
  std::string bf16_key = "bf16";
  if (!bf16 && (bf16 = member(root, "bfloat16"))) bf16_key = "bfloat16";
  const bool was_fp16 = p.precision == Precision::Fp16, was_bf16 = p.precision == Precision::Bf16;
  const bool fp16_on =
      fp16 ? enabled_flag(as_object(*fp16, "fp16"), "fp16", diagnostics, was_fp16) : was_fp16;
  const bool bf16_on =
      bf16 ? enabled_flag(as_object(*bf16, bf16_key), bf16_key, diagnostics, was_bf16) : was_bf16;
  if (fp16_on && bf16_on) throw InputError("bf16.enabled", "fp16 and bf16 cannot both be enabled");
  if (fp16) {
    warn_unknown_keys(*fp16, {"enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                              "consecutive_hysteresis", "min_loss_scale", "fp16_master_weights_and_grads"},
                      "fp16", diagnostics);
    LossScaleConfig& ls = p.loss_scale;
    if (const json* v = member(*fp16, "loss_scale")) ls.static_loss_scale = as_double(*v, "fp16.loss_scale");
    if (const json* v = member(*fp16, "initial_scale_power")) ls.initial_scale_power = int(as_int(*v, "fp16.initial_scale_power", 0, 127));
    if (const json* v = member(*fp16, "loss_scale_window")) ls.loss_scale_window = int(as_int(*v, "fp16.loss_scale_window", 1, 1 << 30));
    if (const json* v = member(*fp16, "hysteresis")) ls.hysteresis = int(as_int(*v, "fp16.hysteresis", 0, 1 << 30));
    if (const json* v = member(*fp16, "consecutive_hysteresis")) ls.consecutive_hysteresis = as_bool(*v, "fp16.consecutive_hysteresis");
    if (const json* v = member(*fp16, "min_loss_scale")) ls.min_loss_scale = as_double(*v, "fp16.min_loss_scale");
  }
  if (bf16) warn_unknown_keys(*bf16, {"enabled", "immediate_grad_update", "check_grad_overflow"}, bf16_key, diagnostics);
  p.precision = fp16_on ? Precision::Fp16 : bf16_on ? Precision::Bf16 : Precision::Fp32;
  if (const json* types = member(root, "data_types")) {
    as_object(*types, "data_types");
    if (const json* v = member(*types, "grad_accum_dtype")) {
      p.fp32_grad_accumulation = parse_precision(as_string(*v, "data_types.grad_accum_dtype"),
                                                 "data_types.grad_accum_dtype") == Precision::Fp32;
    }
  }
}

double param_or(const json& params, const char* key, double fallback) {
  const json* v = member(params, key);
  if (!v || (v->is_string() && v->get<std::string>() == "auto")) return fallback;
  return as_double(*v, std::string("optimizer.params.") + key);
}

void read_optimizer_params(const json& params, OptimizerConfig& o) {
  o.lr = param_or(params, "lr", o.lr);
  o.eps = param_or(params, "eps", o.eps);
  o.weight_decay = param_or(params, "weight_decay", o.weight_decay);
  o.momentum = param_or(params, "momentum", o.momentum);
  if (const json* betas = member(params, "betas"); betas && !betas->is_string()) {
    if (!betas->is_array() || betas->size() != 2) throw InputError("optimizer.params.betas", "must be an array of two numbers");
    o.beta1 = as_double((*betas)[0], "optimizer.params.betas[0]", 0, 1);
    o.beta2 = as_double((*betas)[1], "optimizer.params.betas[1]", 0, 1);
  }
  // DeepSpeed builds torch.optim.Adam[W] instead of FusedAdam (ops/adam, engine
  // _configure_basic_optimizer): torch's foreach kernel on the GPU.
  if (const json* v = member(params, "torch_adam")) {
    o.kernel = as_bool(*v, "optimizer.params.torch_adam") ? OptimizerKernel::Foreach
                                                          : OptimizerKernel::Fused;
  }
  // Read only for Adam, where it means something.
  if (const json* v = member(params, "adam_w_mode"); v && o.type == OptimizerType::Adam) {
    o.adam_w_mode = as_bool(*v, "optimizer.params.adam_w_mode");
  }
}

void read_optimizer(const json& root, Diagnostics& diagnostics, OptimizerConfig& o) {
  const json* block = member(root, "optimizer");
  if (!block) return;
  as_object(*block, "optimizer");
  warn_unknown_keys(*block, {"type", "params"}, "optimizer", diagnostics);
  if (const json* v = member(*block, "type"))
    o.type = parse_optimizer_type(as_string(*v, "optimizer.type"));
  const json* params = member(*block, "params");
  if (params) read_optimizer_params(as_object(*params, "optimizer.params"), o);
  if (o.type == OptimizerType::Adam && o.adam_w_mode) o.type = OptimizerType::AdamW;
}

void read_checkpointing(const json& root, Diagnostics& diagnostics,
                        ActivationCheckpointingConfig& a) {
  const json* block = member(root, "activation_checkpointing");
  if (!block) return;
  const std::string w = "activation_checkpointing";
  as_object(*block, w);
  warn_unknown_keys(*block, {"partition_activations", "cpu_checkpointing", "contiguous_memory_optimization",
                             "number_checkpoints", "synchronize_checkpoint_boundary", "profile"}, w, diagnostics);
  a.enabled = true;
  if (const json* v = member(*block, "partition_activations")) a.partition_activations = as_bool(*v, join_key(w, "partition_activations"));
  if (const json* v = member(*block, "cpu_checkpointing")) a.cpu_checkpointing = as_bool(*v, join_key(w, "cpu_checkpointing"));
  if (const json* v = member(*block, "contiguous_memory_optimization")) {
    a.contiguous_memory_optimization = as_bool(*v, join_key(w, "contiguous_memory_optimization"));
  }
  if (const json* v = member(*block, "number_checkpoints"))
    a.number_checkpoints = int(as_int(*v, join_key(w, "number_checkpoints"), 1, 1 << 20));
}

// A batch key: its value, none for "auto" (the HF Trainer decides), the config's without the key.
void read_batch_value(const json& root, const char* key, std::optional<std::int64_t>& size) {
  const json* v = member(root, key);
  if (!v) return;
  size = v->is_string() && v->get<std::string>() == "auto"
             ? std::nullopt
             : std::optional(as_int(*v, key, 1, kMaxConfigBatch));
}

}  // namespace

OptimizerType parse_optimizer_type(const std::string& text) {
  std::string name;
  for (char c : text) name += char(std::tolower(static_cast<unsigned char>(c)));
  if (name == "adam" || name == "fusedadam" || name == "cpuadam" || name == "deepspeedcpuadam")
    return OptimizerType::Adam;
  if (name == "adamw") return OptimizerType::AdamW;
  if (name == "sgd") return OptimizerType::Sgd;
  throw InputError("optimizer.type",
                   "unsupported optimizer '" + text + "' (zerolens models Adam, AdamW and SGD)");
}

// DeepSpeed's AutoTP training block (runtime/tensor_parallel/config.py): autotp_size ranks per
// tensor-parallel group. sequence_parallel is zerolens's (Megatron's --sequence-parallel, not a
// DeepSpeed key): a written config keeps it.
void read_tensor_parallel(const json& root, Diagnostics& diagnostics, TensorParallelism& tp) {
  const json* block = member(root, "tensor_parallel");
  if (!block) return;
  as_object(*block, "tensor_parallel");
  warn_unknown_keys(*block,
                    {"autotp_size", "sequence_parallel", "tp_overlap_comm", "tp_grain_size",
                     "preset_model", "partition_config", "tp", "vocab_parallel_lm_head"},
                    "tensor_parallel", diagnostics);
  if (const json* size = member(*block, "autotp_size")) {
    tp.size = int(as_int(*size, "tensor_parallel.autotp_size", 1, 4096));
  }
  const json* vocab_parallel = member(*block, "vocab_parallel_lm_head");
  if (tp.size > 1 &&
      !(vocab_parallel && as_bool(*vocab_parallel, "tensor_parallel.vocab_parallel_lm_head"))) {
    // module_inject/auto_tp.py (0.19.8): _slice_embedding cuts embeddings along the hidden
    // dimension, and in training the LM head is a column-parallel LinearLayer with
    // gather_output=True; a Conv1D GPT-2 keeps both whole.
    diagnostics.warn(
        "tensor_parallel.autotp_size",
        "zerolens plans Megatron's layout (embedding, LM head and loss split over the "
        "vocabulary); DeepSpeed's AutoTP gathers the LM head's logits on every rank "
        "unless tensor_parallel.vocab_parallel_lm_head is true, so the loss's memory per "
        "rank can be up to autotp_size times the plan's");
  }
  if (const json* sp = member(*block, "sequence_parallel")) {
    tp.sequence_parallel = as_bool(*sp, "tensor_parallel.sequence_parallel");
  }
}

// DeepSpeed's pipeline block (runtime/config.py get_pipeline_config): "stages" is "auto" unless
// written (the PipelineModule's num_stages). virtual_stages and schedule are zerolens's (Megatron's
// --num-layers-per-virtual-pipeline-stage); a written config keeps them.
void read_pipeline(const json& root, Diagnostics& diagnostics, PipelineParallelism& pipeline) {
  const json* block = member(root, "pipeline");
  if (!block) return;
  as_object(*block, "pipeline");
  warn_unknown_keys(
      *block,
      {"stages", "partition", "seed_layers", "activation_checkpoint_interval", "pipe_partitioned",
       "grad_partitioned", "use_reentrant", "virtual_stages", "schedule"},
      "pipeline", diagnostics);
  if (const json* stages = member(*block, "stages");
      stages && !(stages->is_string() && *stages == "auto")) {
    pipeline.size = int(as_int(*stages, "pipeline.stages", 1, 4096));
  }
  if (const json* chunks = member(*block, "virtual_stages")) {
    pipeline.virtual_stages = int(as_int(*chunks, "pipeline.virtual_stages", 1, 1024));
  }
  if (const json* schedule = member(*block, "schedule")) {
    pipeline.schedule =
        parse_pipeline_schedule(as_string(*schedule, "pipeline.schedule"), "pipeline.schedule");
  }
}

// zerolens's "moe" block: the arguments of DeepSpeed's MoE layer (deepspeed/moe/layer.py MoE:
// ep_size, capacity_factor, min_capacity), which DeepSpeed takes in the model's code, not its
// config; a written config keeps them.
void read_moe(const json& root, Diagnostics& diagnostics, ExpertParallelism& ep) {
  const json* block = member(root, "moe");
  if (!block) return;
  as_object(*block, "moe");
  warn_unknown_keys(*block, {"ep_size", "capacity_factor", "min_capacity"}, "moe", diagnostics);
  if (const json* size = member(*block, "ep_size"))
    ep.size = int(as_int(*size, "moe.ep_size", 1, 4096));
  if (const json* factor = member(*block, "capacity_factor"))
    ep.capacity_factor = as_double(*factor, "moe.capacity_factor", 1e-6, 1024);
  if (const json* minimum = member(*block, "min_capacity"))
    ep.min_capacity = int(as_int(*minimum, "moe.min_capacity", 0, 1 << 30));
}

void read_deepspeed_onto(const json& root, Diagnostics& diagnostics,
                         std::optional<std::int64_t> hidden_size, TrainingConfig& c) {
  as_object(root, "config");
  warn_unknown_keys(root, kTopLevelKeys, "", diagnostics);
  note_unmodelled_keys(root, diagnostics);
  const Reader reader{root, diagnostics, hidden_size};
  if (const json* zero = member(root, "zero_optimization")) read_zero(*zero, reader, c.zero);
  read_precision(root, diagnostics, c.precision);
  read_batch_value(root, "train_batch_size", c.batch.train_batch_size);
  read_batch_value(root, "train_micro_batch_size_per_gpu", c.batch.micro_batch_per_gpu);
  read_batch_value(root, "gradient_accumulation_steps", c.batch.gradient_accumulation_steps);
  read_checkpointing(root, diagnostics, c.activation_checkpointing);
  read_optimizer(root, diagnostics, c.optimizer);
  read_tensor_parallel(root, diagnostics, c.tensor_parallel);
  read_pipeline(root, diagnostics, c.pipeline);
  read_moe(root, diagnostics, c.expert_parallel);
  if (const json* v = member(root, "gradient_clipping")) {
    c.gradient_clipping = reader.is_auto(*v) ? 1.0 : as_double(*v, "gradient_clipping");
  }
  if (const json* v = member(root, "prescale_gradients")) c.prescale_gradients = as_bool(*v, "prescale_gradients");
  if (const json* v = member(root, "gradient_predivide_factor")) {
    c.gradient_predivide_factor = as_double(*v, "gradient_predivide_factor", 1e-12);
  }
}

void finish_training_config(const TrainingConfig& c, Diagnostics& diagnostics) {
  const ActivationCheckpointingConfig& a = c.activation_checkpointing;
  if (a.enabled && a.cpu_checkpointing && !a.partition_activations) {
    diagnostics.warn("activation_checkpointing.cpu_checkpointing",
                     "DeepSpeed offloads only partitioned activations; has no effect without "
                     "partition_activations");
  }
  c.validate();
}

TrainingConfig parse_deepspeed_config(const json& root, Diagnostics& diagnostics,
                                      std::optional<std::int64_t> hidden_size) {
  TrainingConfig c;
  read_deepspeed_onto(root, diagnostics, hidden_size, c);
  finish_training_config(c, diagnostics);
  return c;
}

void apply_override(json& root, const std::string& assignment) {
  const auto equals = assignment.find('=');
  if (equals == std::string::npos || equals == 0) {
    throw InputError("--set", "expected KEY=VALUE (e.g. zero_optimization.stage=3), got '" + assignment + "'");
  }
  const std::string key = assignment.substr(0, equals);
  const std::string text = assignment.substr(equals + 1);
  json value = json::parse(text, nullptr, false);
  if (value.is_discarded()) value = text;
  json* node = &root;
  std::size_t start = 0;
  while (true) {
    const auto dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty()) throw InputError("--set", "empty key component in '" + key + "'");
    if (!node->is_object()) *node = json::object();
    node = &(*node)[part];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  *node = value;
}

}  // namespace zerolens
