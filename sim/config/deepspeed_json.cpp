// The config written back in DeepSpeed's key names.
#include <nlohmann/json.hpp>

#include "sim/config/deepspeed_json.hpp"

namespace zerolens {
namespace {

using nlohmann::json;

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
  if (z.shard_group_size > 0) zero["mics_shard_size"] = z.shard_group_size;
  if (z.hpz_partition_size > 1) zero["zero_hpz_partition_size"] = z.hpz_partition_size;
  if (z.quantized_weights) zero["zero_quantized_weights"] = true;
  if (z.quantized_gradients) zero["zero_quantized_gradients"] = true;
  if (!z.reduce_buffers_at_first_hook) zero["reduce_buffers_at"] = "backward";
  if (z.delay_param_update) zero["delay_param_update"] = true;
  if (z.delay_param_update_warmup != ZeroConfig{}.delay_param_update_warmup)
    zero["delay_param_update_warmup"] = z.delay_param_update_warmup;
  return zero;
}

json optimizer_json(const OptimizerConfig& o) {
  json params = {{"lr", o.lr}, {"eps", o.eps}, {"weight_decay", o.weight_decay}, {"betas", {o.beta1, o.beta2}}};
  if (o.type == OptimizerType::Sgd) params = {{"lr", o.lr}, {"momentum", o.momentum}, {"weight_decay", o.weight_decay}};
  // torch_adam names torch.optim (foreach, or for-loop with an older torch: traces keep which in
  // their framework block); false, FusedAdam. Unset: DeepSpeed's default, not written.
  if (o.kernel) params["torch_adam"] = *o.kernel != OptimizerKernel::Fused;
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
  if (p.fp32_grad_accumulation && p.mixed()) out["data_types"] = {{"grad_accum_dtype", "fp32"}};
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
  if (c.tensor_parallel.active() || c.tensor_parallel.sequence_parallel) {
    // vocab_parallel_lm_head: the vocabulary-split LM head and loss zerolens plans (Megatron's),
    // which DeepSpeed's AutoTP gives only with it.
    out["tensor_parallel"] = {{"autotp_size", c.tensor_parallel.size},
                              {"sequence_parallel", c.tensor_parallel.sequence_parallel},
                              {"vocab_parallel_lm_head", true}};
  }
  if (c.pipeline.active()) {
    out["pipeline"] = {{"stages", c.pipeline.size},
                       {"virtual_stages", c.pipeline.virtual_stages},
                       {"schedule", to_string(c.pipeline.schedule)}};
  }
  const ExpertParallelism& ep = c.expert_parallel;
  if (ep.active() || ep.capacity_factor != ExpertParallelism{}.capacity_factor ||
      ep.min_capacity != ExpertParallelism{}.min_capacity) {
    out["moe"] = {{"ep_size", ep.size},
                  {"capacity_factor", ep.capacity_factor},
                  {"min_capacity", ep.min_capacity}};
  }
  out["gradient_clipping"] = c.gradient_clipping;
  out["prescale_gradients"] = c.prescale_gradients;
  out["gradient_predivide_factor"] = c.gradient_predivide_factor;
  return out;
}

}  // namespace zerolens
