#include "cli/plan_options.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

#include "sim/json_read.hpp"
#include "sim/model_io.hpp"

namespace zerolens::cli {
namespace {

using nlohmann::json;

json& at_path(json& root, std::initializer_list<const char*> keys) {
  json* node = &root;
  for (const char* key : keys) {
    if (!node->is_object()) *node = json::object();
    node = &(*node)[key];
  }
  return *node;
}

void set_size(json& ds, const char* key, const std::optional<double>& value) {
  if (value) at_path(ds, {"zero_optimization", key}) = *value;
}

void set_flag(json& ds, const char* key, const std::optional<bool>& value) {
  if (value) at_path(ds, {"zero_optimization", key}) = *value;
}

// --micro-batch keeps gradient_accumulation_steps and lets train_batch_size follow, and so on: a
// flag replaces the batch fields it conflicts with unless those were given as flags too.
void apply_batch_flags(const PlanOptions& o, json& ds) {
  if (!ds.is_object()) return;
  if ((o.micro_batch || o.grad_accum) && !o.train_batch) ds.erase("train_batch_size");
  if (o.train_batch && !o.micro_batch && !o.grad_accum) {
    ds.erase("train_micro_batch_size_per_gpu");
  }
  if (o.micro_batch) ds["train_micro_batch_size_per_gpu"] = *o.micro_batch;
  if (o.grad_accum) ds["gradient_accumulation_steps"] = *o.grad_accum;
  if (o.train_batch) ds["train_batch_size"] = *o.train_batch;
  const bool has_batch = ds.contains("train_batch_size") || ds.contains("train_micro_batch_size_per_gpu");
  if (!has_batch) ds["train_micro_batch_size_per_gpu"] = 1;
}

void apply_precision_flag(const PlanOptions& o, json& ds) {
  if (!o.precision) return;
  const Precision precision = parse_precision(*o.precision, "--precision");
  at_path(ds, {"fp16", "enabled"}) = precision == Precision::Fp16;
  at_path(ds, {"bf16", "enabled"}) = precision == Precision::Bf16;
  if (ds.contains("bfloat16")) ds.erase("bfloat16");
}

void apply_checkpointing_flags(const PlanOptions& o, json& ds) {
  if (o.activation_checkpointing && !*o.activation_checkpointing) {
    ds.erase("activation_checkpointing");
    return;
  }
  if (o.activation_checkpointing && !ds.contains("activation_checkpointing")) {
    ds["activation_checkpointing"] = json::object();
  }
  if (o.cpu_checkpointing) at_path(ds, {"activation_checkpointing", "cpu_checkpointing"}) = *o.cpu_checkpointing;
  if (o.partition_activations) {
    at_path(ds, {"activation_checkpointing", "partition_activations"}) = *o.partition_activations;
  }
}

void apply_zero_flags(const PlanOptions& o, json& ds) {
  if (o.stage) at_path(ds, {"zero_optimization", "stage"}) = *o.stage;
  if (o.offload_optimizer) at_path(ds, {"zero_optimization", "offload_optimizer", "device"}) = *o.offload_optimizer;
  if (o.offload_param) at_path(ds, {"zero_optimization", "offload_param", "device"}) = *o.offload_param;
  for (const char* block : {"offload_optimizer", "offload_param"}) {
    if (o.nvme_path) at_path(ds, {"zero_optimization", block, "nvme_path"}) = *o.nvme_path;
    if (o.pin_memory) at_path(ds, {"zero_optimization", block, "pin_memory"}) = *o.pin_memory;
  }
  set_size(ds, "reduce_bucket_size", o.reduce_bucket_size);
  set_size(ds, "allgather_bucket_size", o.allgather_bucket_size);
  set_size(ds, "stage3_prefetch_bucket_size", o.prefetch_bucket_size);
  set_size(ds, "stage3_param_persistence_threshold", o.param_persistence_threshold);
  set_size(ds, "stage3_max_live_parameters", o.max_live_parameters);
  set_size(ds, "stage3_max_reuse_distance", o.max_reuse_distance);
  set_size(ds, "sub_group_size", o.sub_group_size);
  set_flag(ds, "overlap_comm", o.overlap_comm);
  set_flag(ds, "contiguous_gradients", o.contiguous_gradients);
  set_flag(ds, "reduce_scatter", o.reduce_scatter);
}

void apply_optimizer_flags(const PlanOptions& o, json& ds) {
  if (o.optimizer) at_path(ds, {"optimizer", "type"}) = *o.optimizer;
  if (o.momentum) at_path(ds, {"optimizer", "params", "momentum"}) = *o.momentum;
}

Model load_plan_model(const PlanOptions& o, Diagnostics& diagnostics) {
  Model model = o.hf_config ? model_from_hf_config(json_read::parse_json_file(*o.hf_config, "--hf-config"),
                                                   diagnostics, *o.hf_config)
                            : load_model(o.model, diagnostics);
  if (o.attention) model = with_attention(model, parse_attention_impl(*o.attention));
  return model;
}

TrainingConfig load_plan_config(const PlanOptions& o, const Model& model, Diagnostics& diagnostics) {
  json ds = json::object();
  if (o.deepspeed_config) {
    ds = json_read::parse_json_file(*o.deepspeed_config, "--deepspeed-config");
    // A ColossalAI document is translated to DeepSpeed keys first so the same flags apply.
    if (ds.is_object() && ds.contains("zero") && ds.at("zero").is_object() && ds.at("zero").contains("level")) {
      ds = to_deepspeed_json(parse_colossalai_config(ds, diagnostics));
    }
  }
  if (!ds.is_object()) throw InputError(*o.deepspeed_config, "the config must be a JSON object");
  apply_zero_flags(o, ds);
  apply_batch_flags(o, ds);
  apply_precision_flag(o, ds);
  apply_checkpointing_flags(o, ds);
  apply_optimizer_flags(o, ds);
  for (const auto& assignment : o.set) apply_override(ds, assignment);
  std::optional<std::int64_t> hidden;
  if (model.shape) hidden = model.shape->hidden;
  TrainingConfig config = parse_deepspeed_config(ds, diagnostics, hidden);
  if (o.seq_len) config.seq_len = *o.seq_len;
  return config;
}

ScheduleOptions load_accounting(const PlanOptions& o) {
  ScheduleOptions options;
  options.model_states_only = o.model_states_only;
  auto gib = [](double value, const char* flag) {
    if (!(value >= 0) || value > 1e6) throw InputError(flag, "must be between 0 and 1e6 GiB");
    return Bytes(std::llround(value * double(kBytesPerGiB)));
  };
  if (o.cuda_context_gib) options.cuda_context_bytes = gib(*o.cuda_context_gib, "--cuda-context");
  if (o.workspace_gib) options.library_workspace_bytes = gib(*o.workspace_gib, "--workspace");
  if (o.fragmentation) {
    if (!(*o.fragmentation >= 0 && *o.fragmentation < 1)) {
      throw InputError("--fragmentation", "must be in [0, 1)");
    }
    options.fragmentation_fraction = *o.fragmentation;
  }
  return options;
}

}  // namespace

void add_plan_options(CLI::App& app, PlanOptions& o) {
  app.add_option("-m,--model", o.model,
                 "Model: a preset (gpt2-124m ... llama3-70b, gpt2-tiny), dense:<N> (exactly N "
                 "parameters, e.g. dense:7.5e9), or a JSON file (Hugging Face config.json or a layer list)")
      ->capture_default_str();
  app.add_option("--hf-config", o.hf_config, "Hugging Face config.json (GPT-2, LLaMA, Mistral); overrides --model");
  app.add_option("-c,--deepspeed-config", o.deepspeed_config,
                 "DeepSpeed config JSON (or ColossalAI zero fields as JSON); flags override it");
  app.add_option("--cluster", o.cluster,
                 "Cluster preset (dgx-2, dgx-a100-40gb, dgx-a100-80gb, dgx-h100, h100-x1) or JSON file")
      ->capture_default_str();
  app.add_option("-g,--gpus", o.gpus, "Data-parallel ranks (GPUs); default: all GPUs of the cluster preset")
      ->check(CLI::Range(1, 10'000'000));
  app.add_option("--gpus-per-node", o.gpus_per_node, "GPUs per node (default: the cluster's)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--attention", o.attention, "Attention implementation for activation memory: eager|flash")
      ->check(CLI::IsMember({"eager", "flash"}));
  auto* zero = "DeepSpeed fields";
  app.add_option("-s,--stage", o.stage, "zero_optimization.stage (0 = plain data parallelism)")
      ->check(CLI::Range(0, 3))->group(zero);
  app.add_option("--offload-optimizer", o.offload_optimizer, "zero_optimization.offload_optimizer.device: none|cpu|nvme")
      ->check(CLI::IsMember({"none", "cpu", "nvme"}))->group(zero);
  app.add_option("--offload-param", o.offload_param, "zero_optimization.offload_param.device: none|cpu|nvme (stage 3)")
      ->check(CLI::IsMember({"none", "cpu", "nvme"}))->group(zero);
  app.add_option("--nvme-path", o.nvme_path, "nvme_path of both offload blocks")->group(zero);
  app.add_option("--pin-memory", o.pin_memory, "pin_memory of both offload blocks (true|false)")->group(zero);
  app.add_option("-b,--micro-batch", o.micro_batch,
                 "train_micro_batch_size_per_gpu (keeps gradient_accumulation_steps; train_batch_size follows)")
      ->check(CLI::PositiveNumber)->group(zero);
  app.add_option("--grad-accum", o.grad_accum, "gradient_accumulation_steps")->check(CLI::PositiveNumber)->group(zero);
  app.add_option("--train-batch", o.train_batch, "train_batch_size (= micro x accumulation x ranks)")
      ->check(CLI::PositiveNumber)->group(zero);
  app.add_option("--seq-len", o.seq_len, "Sequence length (default: the model's maximum)")
      ->check(CLI::PositiveNumber)->group(zero);
  app.add_option("-p,--precision", o.precision, "fp32|fp16|bf16 (sets the fp16/bf16 blocks; DeepSpeed's default is fp32)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}))->group(zero);
  app.add_option("--optimizer", o.optimizer, "optimizer.type: adam|adamw|sgd")->group(zero);
  app.add_option("--momentum", o.momentum, "optimizer.params.momentum (SGD)")->group(zero);
  app.add_option("--activation-checkpointing", o.activation_checkpointing,
                 "Checkpoint every transformer block (true|false)")->group(zero);
  app.add_option("--cpu-checkpointing", o.cpu_checkpointing, "activation_checkpointing.cpu_checkpointing")->group(zero);
  app.add_option("--partition-activations", o.partition_activations,
                 "activation_checkpointing.partition_activations")->group(zero);
  app.add_option("--reduce-bucket-size", o.reduce_bucket_size, "zero_optimization.reduce_bucket_size (elements)")->group(zero);
  app.add_option("--allgather-bucket-size", o.allgather_bucket_size, "zero_optimization.allgather_bucket_size (elements)")->group(zero);
  app.add_option("--prefetch-bucket-size", o.prefetch_bucket_size, "stage3_prefetch_bucket_size (elements)")->group(zero);
  app.add_option("--param-persistence-threshold", o.param_persistence_threshold,
                 "stage3_param_persistence_threshold (elements)")->group(zero);
  app.add_option("--max-live-parameters", o.max_live_parameters, "stage3_max_live_parameters (elements)")->group(zero);
  app.add_option("--max-reuse-distance", o.max_reuse_distance, "stage3_max_reuse_distance (elements)")->group(zero);
  app.add_option("--sub-group-size", o.sub_group_size, "zero_optimization.sub_group_size (elements)")->group(zero);
  app.add_option("--overlap-comm", o.overlap_comm, "zero_optimization.overlap_comm (true|false)")->group(zero);
  app.add_option("--contiguous-gradients", o.contiguous_gradients, "zero_optimization.contiguous_gradients")->group(zero);
  app.add_option("--reduce-scatter", o.reduce_scatter, "zero_optimization.reduce_scatter")->group(zero);
  app.add_option("--set", o.set, "Any DeepSpeed key: --set zero_optimization.round_robin_gradients=true (repeatable)")
      ->group(zero);
  auto* accounting = "Accounting";
  app.add_flag("--model-states-only", o.model_states_only,
               "Count model states only (the ZeRO paper's accounting): no activations, buffers or overhead")
      ->group(accounting);
  app.add_option("--cuda-context", o.cuda_context_gib, "CUDA context per GPU in GiB (default 0.5)")->group(accounting);
  app.add_option("--workspace", o.workspace_gib, "cuBLAS/NCCL workspaces per GPU in GiB (default 0.25)")->group(accounting);
  app.add_option("--fragmentation", o.fragmentation, "Allocator fragmentation allowance, fraction of the peak (default 0.05)")
      ->group(accounting);
}

PlanRequest make_plan_request(const PlanOptions& o, Diagnostics& diagnostics) {
  PlanRequest request;
  request.model = load_plan_model(o, diagnostics);
  request.config = load_plan_config(o, request.model, diagnostics);
  Cluster cluster = load_cluster(o.cluster, diagnostics);
  request.dp_size = o.gpus.value_or(cluster.total_gpus());
  request.cluster = with_ranks(cluster, request.dp_size, o.gpus_per_node.value_or(0));
  request.options = load_accounting(o);
  return request;
}

}  // namespace zerolens::cli
