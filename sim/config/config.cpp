// Enum names, batch resolution and cross-field validation of the training config.
#include "sim/config/config.hpp"

#include <algorithm>
#include <cctype>

namespace zerolens {
namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return text;
}

std::string zero_key(const std::string& key) { return "zero_optimization." + key; }

void require(bool ok, const std::string& where, const std::string& why) {
  if (!ok) throw InputError(where, why);
}

void validate_offload(const OffloadConfig& offload, const std::string& block) {
  const std::string where = zero_key(block);
  require(offload.device != OffloadDevice::Nvme || !offload.nvme_path.empty(), where + ".nvme_path",
          "is required when device is \"nvme\"");
  require(offload.buffer_count >= 1, where + ".buffer_count", "must be at least 1");
  require(offload.ratio >= 0 && offload.ratio <= 1, where + ".ratio", "must be in [0, 1]");
}

}  // namespace

const char* to_string(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::None: return "none";
    case OffloadDevice::Cpu: return "cpu";
    case OffloadDevice::Nvme: return "nvme";
  }
  return "none";
}

const char* to_string(Precision precision) {
  switch (precision) {
    case Precision::Fp32: return "fp32";
    case Precision::Fp16: return "fp16";
    case Precision::Bf16: return "bf16";
  }
  return "fp32";
}

const char* to_string(OptimizerType type) {
  switch (type) {
    case OptimizerType::Adam: return "Adam";
    case OptimizerType::AdamW: return "AdamW";
    case OptimizerType::Sgd: return "SGD";
  }
  return "Adam";
}

OffloadDevice parse_offload_device(const std::string& text, const std::string& where) {
  const std::string name = lower(text);
  if (name == "none") return OffloadDevice::None;
  if (name == "cpu") return OffloadDevice::Cpu;
  if (name == "nvme") return OffloadDevice::Nvme;
  throw InputError(where, "unknown device '" + text + "' (expected none, cpu or nvme)");
}

Precision parse_precision(const std::string& text, const std::string& where) {
  const std::string name = lower(text);
  if (name == "fp32" || name == "float32") return Precision::Fp32;
  if (name == "fp16" || name == "float16") return Precision::Fp16;
  if (name == "bf16" || name == "bfloat16") return Precision::Bf16;
  throw InputError(where, "unknown precision '" + text + "' (expected fp32, fp16 or bf16)");
}

std::string ZeroConfig::label() const {
  std::string text = zero_stage().name();
  if (effective_offload(OffloadKind::Optimizer) != OffloadDevice::None) {
    text += std::string(" + opt:") + to_string(offload_optimizer.device);
  }
  if (effective_offload(OffloadKind::Param) != OffloadDevice::None) {
    text += std::string(" + param:") + to_string(offload_param.device);
  }
  if (delay_param_update) text += " + DPU";
  return text;
}

std::string ZeroConfig::description() const {
  std::string text = partitions_optimizer_states() ? zero_stage().name() : "DP (stage 0)";
  if (effective_offload(OffloadKind::Optimizer) != OffloadDevice::None) {
    text += std::string(", optimizer offload ") + to_string(offload_optimizer.device);
  }
  if (effective_offload(OffloadKind::Param) != OffloadDevice::None) {
    text += std::string(", param offload ") + to_string(offload_param.device);
  }
  if (delay_param_update) {
    text +=
        ", delayed parameter update after " + std::to_string(delay_param_update_warmup) + " steps";
  }
  return text;
}

Bytes OptimizerConfig::state_bytes_per_param() const {
  switch (type) {
    case OptimizerType::Adam:
    case OptimizerType::AdamW: return 8;
    case OptimizerType::Sgd: return momentum > 0 ? 4 : 0;
  }
  return 8;
}

// DeepSpeed's rule (runtime/config.py, _set_batch_related_parameters): the missing sizes follow
// from train = micro x accumulation x dp, and all three must agree when all are given.
ResolvedBatch resolve_batch(const BatchConfig& batch, int dp_size) {
  require(dp_size >= 1, "--gpus", "the data-parallel size must be at least 1");
  const auto& train = batch.train_batch_size;
  const auto& micro = batch.micro_batch_per_gpu;
  const auto& accum = batch.gradient_accumulation_steps;
  const std::int64_t dp = dp_size;
  ResolvedBatch r;
  if (train && micro && accum) {
    r = {*train, *micro, *accum};
  } else if (train && micro) {
    r = {*train, *micro, *train / (*micro * dp)};
  } else if (train && accum) {
    r = {*train, *train / (*accum * dp), *accum};
  } else if (micro) {
    const std::int64_t steps = accum.value_or(1);
    r = {*micro * steps * dp, *micro, steps};
  } else if (train) {
    r = {*train, *train / dp, 1};
  } else {
    throw InputError("train_batch_size",
                     "either train_batch_size or train_micro_batch_size_per_gpu must be given as a "
                     "number (\"auto\" is the Hugging Face Trainer's to fill in from its own "
                     "arguments): pass --micro-batch N, and --grad-accum N if it is not 1");
  }
  if (r.micro_batch_per_gpu < 1 || r.gradient_accumulation_steps < 1 ||
      r.train_batch_size != r.micro_batch_per_gpu * r.gradient_accumulation_steps * dp) {
    throw InputError("train_batch_size",
                     "batch sizes do not multiply: train_batch_size (" + std::to_string(r.train_batch_size) +
                         ") must equal train_micro_batch_size_per_gpu (" + std::to_string(r.micro_batch_per_gpu) +
                         ") x gradient_accumulation_steps (" + std::to_string(r.gradient_accumulation_steps) +
                         ") x data-parallel size (" + std::to_string(dp_size) + ")");
  }
  return r;
}

const char* to_string(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::GPipe:
      return "gpipe";
    case PipelineSchedule::OneFOneB:
      return "1f1b";
    case PipelineSchedule::Interleaved:
      return "interleaved";
  }
  return "1f1b";
}

PipelineSchedule parse_pipeline_schedule(const std::string& text, const std::string& where) {
  if (text == "gpipe") return PipelineSchedule::GPipe;
  if (text == "1f1b") return PipelineSchedule::OneFOneB;
  if (text == "interleaved") return PipelineSchedule::Interleaved;
  throw InputError(
      where, "unknown pipeline schedule '" + text + "' (expected gpipe, 1f1b or interleaved)");
}

// DeepSpeed's PipelineEngine asserts "ZeRO-2 and ZeRO-3 are incompatible with pipeline
// parallelism" (runtime/pipe/engine.py); Megatron's distributed optimizer is ZeRO-1. FSDP with a
// pipeline (torchtitan) reshards per micro-batch in ways not modelled yet.
// DeepSpeed's native MoE layers run with ZeRO stage 0-2 only: engine.py
// _validate_zero3_moe_compatibility raises "Native DeepSpeed MoE is not supported with ZeRO Stage
// 3", and FSDP has no expert-parallel groups.
void TrainingConfig::validate_expert_parallel() const {
  const ExpertParallelism& ep = expert_parallel;
  require(ep.size >= 1 && ep.size <= 4096, "moe.ep_size", "must be between 1 and 4096");
  require(ep.capacity_factor > 0 && ep.capacity_factor <= 1024, "moe.capacity_factor",
          "must be in (0, 1024]");
  require(ep.min_capacity >= 0 && ep.min_capacity <= (1 << 30), "moe.min_capacity",
          "must be between 0 and 2^30");
  if (!ep.active()) return;
  require(zero.stage < 3, "moe.ep_size",
          "DeepSpeed's MoE layers run with ZeRO stage 0, 1 or 2 (\"Native DeepSpeed MoE is not "
          "supported with ZeRO Stage 3\"); stage is 3");
  require(!is_fsdp(), "moe.ep_size", "expert parallelism is DeepSpeed's; FSDP has none");
}

void TrainingConfig::validate_pipeline() const {
  require(pipeline.size >= 1 && pipeline.size <= 4096, "pipeline.stages",
          "must be between 1 and 4096");
  require(pipeline.virtual_stages >= 1 && pipeline.virtual_stages <= 1024, "--virtual-stages",
          "must be between 1 and 1024");
  require(pipeline.active() || pipeline.virtual_stages == 1, "--virtual-stages",
          "model chunks per pipeline stage need pipeline parallelism (--pp 2 or more)");
  if (!pipeline.active()) return;
  require(zero.stage <= 1 || is_fsdp(), zero_key("stage"),
          "DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only (\"ZeRO-2 and ZeRO-3 are "
          "incompatible "
          "with pipeline parallelism\"; stage is " +
              std::to_string(zero.stage) + ")");
  require(!is_fsdp(), "--framework",
          "FSDP with pipeline parallelism is not modelled yet (docs/parallelism.md)");
  require((pipeline.virtual_stages > 1) == (pipeline.schedule == PipelineSchedule::Interleaved),
          "--virtual-stages",
          "the interleaved schedule needs --virtual-stages of 2 or more, and more than one virtual "
          "stage needs "
          "--pipeline-schedule interleaved (got " +
              std::to_string(pipeline.virtual_stages) + " with " + to_string(pipeline.schedule) +
              ")");
}

void TrainingConfig::validate() const {
  require(zero.zero_stage().valid(), zero_key("stage"), "must be 0, 1, 2 or 3");
  require(
      zero.offload_param.device == OffloadDevice::None || zero.offload_allowed(OffloadKind::Param),
      zero_key("offload_param.device"),
      "parameter offload requires ZeRO stage 3 (stage is " + std::to_string(zero.stage) + ")");
  require(zero.offload_optimizer.device == OffloadDevice::None ||
              zero.offload_allowed(OffloadKind::Optimizer),
          zero_key("offload_optimizer.device"),
          "optimizer offload requires ZeRO stage 1, 2 or 3 (stage is 0)");
  validate_offload(zero.offload_optimizer, "offload_optimizer");
  validate_offload(zero.offload_param, "offload_param");
  require(zero.offload_param.buffer_size >= 1, zero_key("offload_param.buffer_size"), "must be at least 1");
  require(zero.reduce_bucket_size >= 1, zero_key("reduce_bucket_size"), "must be at least 1");
  require(zero.allgather_bucket_size >= 1, zero_key("allgather_bucket_size"), "must be at least 1");
  require(zero.sub_group_size >= 0, zero_key("sub_group_size"),
          "must be 0 (a sub-group per parameter) or more");
  require(zero.stage3_max_live_parameters >= 0, zero_key("stage3_max_live_parameters"), "must not be negative");
  for (const auto* size : {&batch.train_batch_size, &batch.micro_batch_per_gpu, &batch.gradient_accumulation_steps}) {
    const char* key = size == &batch.train_batch_size    ? "train_batch_size"
                      : size == &batch.micro_batch_per_gpu ? "train_micro_batch_size_per_gpu"
                                                            : "gradient_accumulation_steps";
    require(!*size || **size >= 1, key, "must be a positive integer");
  }
  require(tensor_parallel.size >= 1 && tensor_parallel.size <= 4096, "tensor_parallel.autotp_size",
          "must be between 1 and 4096");
  validate_pipeline();
  validate_expert_parallel();
  require(!tensor_parallel.sequence_parallel || tensor_parallel.active(), "--sp",
          "sequence parallelism splits the tensor-parallel group's work: it needs --tp 2 or more");
  require(zero.shard_group_size >= 0, zero_key("mics_shard_size"), "must be -1 (off) or positive");
  require(zero.shard_group_size == 0 || zero.stage == 3, zero_key("mics_shard_size"),
          "hybrid sharding (MiCS, HSDP) partitions stage 3's states; stage is " +
              std::to_string(zero.stage));
  require(zero.hpz_partition_size >= 1, zero_key("zero_hpz_partition_size"),
          "must be 1 (off) or more");
  require(!zero.zeropp() || zero.stage == 3,
          zero.hpz_partition_size > 1 ? zero_key("zero_hpz_partition_size")
          : zero.quantized_weights    ? zero_key("zero_quantized_weights")
                                      : zero_key("zero_quantized_gradients"),
          "ZeRO++ changes stage 3's parameter gathers and gradient reduction; stage is " +
              std::to_string(zero.stage));
  require(gradient_clipping >= 0, "gradient_clipping", "must not be negative");
  require(gradient_predivide_factor > 0, "gradient_predivide_factor", "must be positive");
  require(!seq_len || *seq_len >= 1, "--seq-len", "must be positive");
  require(!target_seq_len || (*target_seq_len >= 1 && *target_seq_len <= (std::int64_t(1) << 24)),
          "--target-seq-len", "must be between 1 and 2^24");
  require(optimizer.momentum >= 0 && optimizer.momentum < 1, "optimizer.params.momentum", "must be in [0, 1)");
  require(!is_fsdp() || zero.stage == 3, "--framework",
          std::string(to_string(framework)) + " shards parameters (stage 3; stage is " +
              std::to_string(zero.stage) +
              "); its SHARD_GRAD_OP is stage 3 with --reshard-after-forward false");
  validate_colossalai();
  validate_delayed_update();
  require(!is_fsdp() || zero.offload_optimizer.device != OffloadDevice::Nvme, "--framework",
          "FSDP offloads to the CPU only (CPUOffloadPolicy); NVMe offload is DeepSpeed's");
  require(
      !is_fsdp() || zero.offload_optimizer.device == zero.offload_param.device, "--framework",
      "FSDP's CPUOffloadPolicy offloads parameters, gradients and optimizer states together: give "
      "--offload-optimizer and --offload-param the same device");
}

// ColossalAI's ShardedModelV2 (v0.1.x) as the seed documents configure it: ZeroInitContext shards
// every parameter in fp16 (init_context.py _post_init_method: half_fn, shard), ShardedModelV2
// asserts every module was built in it, and the placement policy decides the offload.
void TrainingConfig::validate_colossalai() const {
  if (!is_colossalai()) return;
  const ColossalAiConfig& c = colossalai;
  require(zero.stage == 3, "--framework",
          "ColossalAI's ShardedModelV2 shards every parameter (stage 3; stage is " +
              std::to_string(zero.stage) + ")");
  require(precision.precision == Precision::Fp16, "--precision",
          "ColossalAI's ZeRO runs in fp16 (ZeroInitContext casts every parameter to half); got " +
              std::string(to_string(precision.precision)));
  for (const auto kind : {OffloadKind::Optimizer, OffloadKind::Param}) {
    require(zero.offload(kind).device == OffloadDevice::None,
            zero_key(kind == OffloadKind::Optimizer ? "offload_optimizer.device"
                                                    : "offload_param.device"),
            "ColossalAI places parameters, gradients and optimizer states by "
            "tensor_placement_policy (--placement cuda|cpu|auto), not by DeepSpeed's offload "
            "blocks");
  }
  require(!c.reuse_fp16_shard || batch.gradient_accumulation_steps.value_or(1) <= 1,
          "zero.model_config.reuse_fp16_shard",
          "cannot be used with gradient accumulation (ColossalAI asserts 'Gradien accumulation "
          "is not supported when reuse_fp16_shard=True'; gradient_accumulation is " +
              std::to_string(batch.gradient_accumulation_steps.value_or(1)) + ")");
  require(c.gpu_margin_mem_ratio >= 0 && c.gpu_margin_mem_ratio <= 1,
          "zero.optimizer_config.gpu_margin_mem_ratio", "must be in [0, 1]");
  require(c.reduce_scatter_bucket_size_mb >= 0, "zero.model_config.reduce_scatter_bucket_size_mb",
          "must not be negative (0 reduces every gradient alone)");
  require(!tensor_parallel.active() && !pipeline.active(), "--framework",
          "ColossalAI's ZeRO with tensor or pipeline parallelism is not modelled");
  require(!zero.zeropp() && zero.shard_group_size == 0, "--framework",
          "ZeRO++ and hybrid sharding are DeepSpeed's and FSDP's; ColossalAI has neither");
  require(!zero.delay_param_update, zero_key("delay_param_update"),
          "is ZeRO-Offload's (DeepSpeed); ColossalAI has no delayed parameter update");
}

// The DPU fork implements it in ZeRO-Offload's stage-2 optimizer (zero/stage2.py
// step_with_param_delay): the CPU Adam step is what overlaps the GPU's next step.
void TrainingConfig::validate_delayed_update() const {
  require(zero.delay_param_update_warmup >= 0, zero_key("delay_param_update_warmup"),
          "must not be negative");
  if (!zero.delay_param_update) return;
  require(!is_fsdp(), zero_key("delay_param_update"),
          "is ZeRO-Offload's (DeepSpeed); FSDP has no delayed parameter update");
  require(zero.stage == 1 || zero.stage == 2, zero_key("delay_param_update"),
          "ZeRO-Offload delays the CPU optimizer step of stage 1 or 2 (the DPU fork's "
          "stage2.py); stage is " +
              std::to_string(zero.stage));
  require(zero.offload_optimizer.device == OffloadDevice::Cpu, zero_key("delay_param_update"),
          "overlaps the CPU optimizer step with the next step's forward and backward: it needs "
          "offload_optimizer.device = \"cpu\" (got \"" +
              std::string(to_string(zero.offload_optimizer.device)) + "\")");
  require(!pipeline.active(), zero_key("delay_param_update"),
          "with pipeline parallelism is not modelled");
}

const char* to_string(Framework framework) {
  switch (framework) {
    case Framework::DeepSpeed:
      return "deepspeed";
    case Framework::Fsdp2:
      return "fsdp2";
    case Framework::Fsdp1:
      return "fsdp1";
    case Framework::ColossalAi:
      return "colossalai";
  }
  return "deepspeed";
}

const char* to_string(ShardStrategy strategy) {
  return strategy == ShardStrategy::BucketTensor ? "BucketTensorShardStrategy"
                                                 : "TensorShardStrategy";
}

const char* to_string(PlacementPolicy placement) {
  switch (placement) {
    case PlacementPolicy::Cuda:
      return "cuda";
    case PlacementPolicy::Cpu:
      return "cpu";
    case PlacementPolicy::Auto:
      return "auto";
  }
  return "cuda";
}

ShardStrategy parse_shard_strategy(const std::string& text, const std::string& where) {
  if (text == "TensorShardStrategy" || text == "tensor") return ShardStrategy::Tensor;
  if (text == "BucketTensorShardStrategy" || text == "bucket-tensor")
    return ShardStrategy::BucketTensor;
  throw InputError(where, "unknown shard strategy '" + text +
                              "' (TensorShardStrategy or BucketTensorShardStrategy; as a flag "
                              "tensor or bucket-tensor)");
}

// TensorPlacementPolicyFactory.create: 'cpu', 'cuda' or 'auto', else TypeError.
PlacementPolicy parse_placement_policy(const std::string& text, const std::string& where) {
  for (const auto placement :
       {PlacementPolicy::Cuda, PlacementPolicy::Cpu, PlacementPolicy::Auto}) {
    if (text == to_string(placement)) return placement;
  }
  throw InputError(where, "unknown tensor placement policy '" + text + "' (cuda, cpu or auto)");
}

const char* to_string(OptimizerKernel kernel) {
  switch (kernel) {
    case OptimizerKernel::Fused:
      return "fused";
    case OptimizerKernel::Foreach:
      return "foreach";
    case OptimizerKernel::ForLoop:
      return "for-loop";
  }
  return "fused";
}

OptimizerKernel parse_optimizer_kernel(const std::string& text, const std::string& where) {
  for (const auto kernel :
       {OptimizerKernel::Fused, OptimizerKernel::Foreach, OptimizerKernel::ForLoop}) {
    if (text == to_string(kernel)) return kernel;
  }
  throw InputError(where, "expected fused, foreach or for-loop, got '" + text + "'");
}

OptimizerKernel TrainingConfig::effective_optimizer_kernel() const {
  if (optimizer.kernel) return *optimizer.kernel;
  // (ColossalAI's HybridAdam runs colossal_C.multi_tensor_adam on the GPU: fused.)
  return is_fsdp() ? OptimizerKernel::Foreach : OptimizerKernel::Fused;
}

Framework parse_framework(const std::string& text, const std::string& where) {
  for (const auto framework :
       {Framework::DeepSpeed, Framework::Fsdp2, Framework::Fsdp1, Framework::ColossalAi}) {
    if (text == to_string(framework)) return framework;
  }
  throw InputError(where, "unknown framework '" + text + "' (deepspeed, fsdp2, fsdp1, colossalai)");
}

// FSDP in DeepSpeed's terms. fully_shard shards every parameter (no persistence threshold);
// its implicit prefetch all-gathers the next unit while one runs (FSDPParamGroup's
// pre_forward / pre_backward with one unit in flight); reshard_after_forward frees a unit's
// gathered parameters after its forward, except the unit used next (the root, whose backward
// comes first); its gradients are reduce-scattered when the unit's backward ends, from their own
// buffers (foreach_reduce), with no flat bucket.
ZeroConfig TrainingConfig::effective_zero() const {
  if (is_colossalai()) return colossalai_zero();
  if (!is_fsdp()) return zero;
  ZeroConfig z = zero;
  z.stage3_param_persistence_threshold = 0;
  z.stage3_model_persistence_threshold = INT64_MAX;
  z.stage3_prefetch_bucket_size = 1;
  z.stage3_max_live_parameters = INT64_MAX;
  z.stage3_max_reuse_distance = fsdp.reshard_after_forward ? 0 : INT64_MAX;
  z.contiguous_gradients = false;
  z.reduce_scatter = true;
  z.overlap_comm = true;
  z.round_robin_gradients = false;
  return z;
}

// ColossalAI in DeepSpeed's terms: ZeroHook gathers a module's shards in its pre-forward and
// pre-backward hooks and shards them again in the post hooks (zero_hook.py): no prefetch, no
// reuse, nothing persistent; the ReduceScatterBucketer replaces the flat reduce buffer
// (sim/schedule/colossalai.hpp). Placement "cpu" offloads the parameter shards with the
// gradients and optimizer states; any placement but "cuda" offloads the gradients, and the
// optimizer's fp32 shards live on the policy's device, the host unless "cuda"
// (sharded_optim_v2.py: self.device = policy.device or cpu).
ZeroConfig TrainingConfig::colossalai_zero() const {
  ZeroConfig z = zero;
  z.stage3_param_persistence_threshold = 0;
  z.stage3_model_persistence_threshold = INT64_MAX;
  z.stage3_prefetch_bucket_size = 0;
  z.stage3_max_live_parameters = INT64_MAX;
  z.stage3_max_reuse_distance = 0;
  z.contiguous_gradients = false;
  z.reduce_scatter = true;
  z.overlap_comm = true;
  z.round_robin_gradients = false;
  z.sub_group_size = INT64_MAX;
  const bool host = colossalai.placement != PlacementPolicy::Cuda;
  z.offload_optimizer.device = host ? OffloadDevice::Cpu : OffloadDevice::None;
  z.offload_param.device =
      colossalai.placement == PlacementPolicy::Cpu ? OffloadDevice::Cpu : OffloadDevice::None;
  return z;
}

int optimizer_swap_buffers_per_sub_group(int optimizer_states) { return 2 + std::max(0, optimizer_states); }

int optimizer_swap_buffer_sets(const OffloadConfig& offload, int optimizer_states) {
  return std::max(1, offload.buffer_count / optimizer_swap_buffers_per_sub_group(optimizer_states));
}

bool optimizer_swap_reads_ahead(const OffloadConfig& offload, int optimizer_states) {
  return offload.pipeline_read && optimizer_swap_buffer_sets(offload, optimizer_states) >= 2;
}

}  // namespace zerolens
