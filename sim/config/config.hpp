#pragma once
// Training configuration: a real DeepSpeed config JSON (DeepSpeed's key names and defaults), or the
// ColossalAI `zero = dict(level, offload_optimizer_config, offload_param_config)` fields written as
// JSON. Sizes named *_size / *_threshold / *_parameters / *_distance are element counts, as in
// DeepSpeed.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sim/config/parallelism.hpp"
#include "sim/config/zero_stage.hpp"
#include "sim/core/error.hpp"
#include "sim/core/units.hpp"

namespace zerolens {

enum class OffloadDevice { None, Cpu, Nvme };
enum class Precision { Fp32, Fp16, Bf16 };
enum class OptimizerType { Adam, AdamW, Sgd };

const char* to_string(OffloadDevice device);
const char* to_string(Precision precision);
const char* to_string(OptimizerType type);
OffloadDevice parse_offload_device(const std::string& text, const std::string& where);
Precision parse_precision(const std::string& text, const std::string& where);

struct OffloadConfig {
  OffloadDevice device = OffloadDevice::None;
  std::string nvme_path;
  bool pin_memory = false;
  int buffer_count = 0;         // defaults: 5 for parameters, 4 for the optimizer
  Elements buffer_size = 0;     // parameters only (default 1e8)
  Elements max_in_cpu = 0;      // parameters only (default 1e9)
  bool pipeline_read = false;   // optimizer only
  bool pipeline_write = false;  // optimizer only
  bool fast_init = false;
  double ratio = 1.0;  // optimizer only: fraction of the optimizer step offloaded
};

// NVMe optimizer swapping, as DeepSpeed's optimizer swapper: a sub-group takes one swap buffer of
// sub_group_size elements per fp32 tensor it swaps (the master and each optimizer state) plus one
// for its gradient, so buffer_count buffers hold buffer_count / that many sub-groups at once (at
// least 1: the engine refuses fewer buffers than one sub-group needs).
int optimizer_swap_buffers_per_sub_group(int optimizer_states);
int optimizer_swap_buffer_sets(const OffloadConfig& offload, int optimizer_states);
// DeepSpeed's pipeline_read: the next sub-group is read while this one is updated, which needs
// buffers for two sub-groups (8 for Adam); pipeline_write: the CPU goes on to the next sub-group
// while this one is written (otherwise it waits for the write, as a synchronous swap-out does).
bool optimizer_swap_reads_ahead(const OffloadConfig& offload, int optimizer_states);

struct ZeroConfig {
  int stage = 0;
  OffloadConfig offload_optimizer{.buffer_count = 4};
  OffloadConfig offload_param{.buffer_count = 5, .buffer_size = 100'000'000,
                              .max_in_cpu = 1'000'000'000};
  bool allgather_partitions = true;
  Elements allgather_bucket_size = 500'000'000;
  std::optional<bool> overlap_comm;  // DeepSpeed default: true for stage 3, false otherwise
  bool reduce_scatter = true;
  Elements reduce_bucket_size = 500'000'000;
  bool contiguous_gradients = true;
  // When stages 1-2 allocate their reduce (ipg) buffers: at the step's first gradient hook
  // (DeepSpeed 0.19.8: process_gradients -> setup_buckets), or at the start of backward() (older
  // DeepSpeed, e.g. the 0.9 of 2023). Not a DeepSpeed key: --reduce-buffers-at, or
  // zero_optimization.reduce_buffers_at in a config zerolens reads or writes.
  bool reduce_buffers_at_first_hook = true;
  Elements stage3_prefetch_bucket_size = 50'000'000;
  Elements stage3_param_persistence_threshold = 100'000;
  Elements stage3_model_persistence_threshold = INT64_MAX;
  Elements stage3_max_live_parameters = 1'000'000'000;
  Elements stage3_max_reuse_distance = 1'000'000'000;
  Elements sub_group_size = 1'000'000'000;
  bool round_robin_gradients = false;
  // Hybrid sharding (stage 3): states partitioned over groups of this many data-parallel ranks and
  // replicated across the groups: DeepSpeed's MiCS (mics_shard_size; -1 or 0: off) and FSDP's HSDP
  // (the shard dimension of its device mesh). 0: one group of every data-parallel rank.
  int shard_group_size = 0;
  // ZeRO++ (stage 3; DeepSpeed's zero_hpz_partition_size, zero_quantized_weights,
  // zero_quantized_gradients). hpZ: a secondary copy of the 16-bit parameters partitioned over
  // groups of this many consecutive ranks (a node's), made as forward releases each layer, which
  // backward gathers within the group; 1: off. qwZ: parameter all-gathers in block-quantized int8.
  // qgZ: 2-D gradients reduced by a two-hop (node, then across nodes) all-to-all in int4.
  int hpz_partition_size = 1;
  bool quantized_weights = false;
  bool quantized_gradients = false;
  // ZeRO-Offload's one-step Delayed Parameter Update (Ren et al. 2021, section 5.2): after
  // delay_param_update_warmup steps, the CPU optimizer step of step n runs beside the forward and
  // backward of step n+1, whose parameters are one step stale. DeepSpeed's main branch has no DPU;
  // the key is that of the fork its issue #1260 points to (jren73/delay_param_update,
  // zero/constants.py), whose stage2.py switches it on after 20 steps. The warm-up count is
  // zerolens's key (written when not 20).
  bool delay_param_update = false;
  std::int64_t delay_param_update_warmup = 20;
  bool zeropp() const { return hpz_partition_size > 1 || quantized_weights || quantized_gradients; }

  // What the stage partitions and allows (sim/config/zero_stage.hpp).
  ZeroStage zero_stage() const { return {stage}; }
  bool partitions_optimizer_states() const { return zero_stage().partitions_optimizer_states(); }
  bool partitions_gradients() const { return zero_stage().partitions_gradients(); }
  bool partitions_parameters() const { return zero_stage().partitions_parameters(); }
  bool reduces_at_boundary() const { return zero_stage().reduces_at_boundary(); }
  bool offload_allowed(OffloadKind kind) const { return zero_stage().offload_allowed(kind); }
  const OffloadConfig& offload(OffloadKind kind) const {
    return kind == OffloadKind::Optimizer ? offload_optimizer : offload_param;
  }
  // The device the stage really offloads `kind` to: none where the stage does not allow it.
  OffloadDevice effective_offload(OffloadKind kind) const {
    return offload_allowed(kind) ? offload(kind).device : OffloadDevice::None;
  }
  bool overlap() const { return overlap_comm.value_or(partitions_parameters()); }

  // "DP", "ZeRO-1 + opt:cpu", "ZeRO-3 + opt:nvme + param:nvme": a row of `plan --compare`.
  std::string label() const;
  // "DP (stage 0)", "ZeRO-3, optimizer offload cpu, param offload cpu": the plan's header.
  std::string description() const;
};

struct LossScaleConfig {
  double static_loss_scale = 0;  // "loss_scale": 0 means dynamic
  int initial_scale_power = 16;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
  bool dynamic() const { return static_loss_scale == 0; }
};

struct PrecisionConfig {
  Precision precision = Precision::Fp32;
  LossScaleConfig loss_scale;           // fp16 only
  // data_types.grad_accum_dtype == "fp32" as written: kept when the precision changes, it matters
  // only in mixed precision (fp32 gradients are 4 bytes anyway).
  bool fp32_grad_accumulation = false;
  // Bytes of one parameter / gradient element in the training dtype.
  Bytes param_bytes() const { return precision == Precision::Fp32 ? 4 : 2; }
  Bytes grad_bytes() const { return fp32_grad_accumulation ? 4 : param_bytes(); }
  bool mixed() const { return precision != Precision::Fp32; }
};

struct ActivationCheckpointingConfig {
  bool enabled = false;
  bool partition_activations = false;
  bool cpu_checkpointing = false;
  bool contiguous_memory_optimization = false;
  std::optional<int> number_checkpoints;
};

// How the optimizer's arithmetic runs on the GPU, which decides its temporaries. Fused: one kernel
// per element (DeepSpeed's FusedAdam, torch's fused=True): none. Foreach: torch.optim's default on
// CUDA tensors since PyTorch 2.0 (_multi_tensor_adam[w]), which builds sqrt(exp_avg_sq) as new
// tensors (torch._foreach_sqrt) of all the stepped elements before the update divides by them.
// ForLoop: foreach=False, PyTorch 1.x's default (_single_tensor_adam[w]): per tensor,
// denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt), two temporaries of that tensor at once.
enum class OptimizerKernel : std::uint8_t { Fused, Foreach, ForLoop };
const char* to_string(OptimizerKernel kernel);
OptimizerKernel parse_optimizer_kernel(const std::string& text,
                                       const std::string& where);  // throws InputError

struct OptimizerConfig {
  OptimizerType type = OptimizerType::Adam;
  // Unset: the framework's default (DeepSpeed FusedAdam; FSDP runs take torch.optim, foreach).
  // DeepSpeed's optimizer.params.torch_adam = true selects torch.optim: Foreach.
  std::optional<OptimizerKernel> kernel;
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;  // SGD
  bool adam_w_mode = false;  // params.adam_w_mode as written: makes "Adam" AdamW
  // Optimizer state bytes per parameter besides the fp32 master copy: Adam/AdamW 8 (m, v);
  // SGD with momentum 4; plain SGD 0.
  Bytes state_bytes_per_param() const;
};

// Batch sizes as written; resolve() applies DeepSpeed's rule train = micro x accumulation x dp.
struct BatchConfig {
  std::optional<std::int64_t> train_batch_size;
  std::optional<std::int64_t> micro_batch_per_gpu;
  std::optional<std::int64_t> gradient_accumulation_steps;
};

struct ResolvedBatch {
  std::int64_t train_batch_size = 0;
  std::int64_t micro_batch_per_gpu = 0;
  std::int64_t gradient_accumulation_steps = 0;
};

// Throws InputError naming the key when the sizes cannot be reconciled with dp_size.
ResolvedBatch resolve_batch(const BatchConfig& batch, int dp_size);

// Which framework runs the step. Each allocates differently for the same sharding
// (docs/memory-model.md, "Framework profiles").
enum class Framework : std::uint8_t { DeepSpeed, Fsdp2, Fsdp1, ColossalAi };
const char* to_string(Framework framework);
Framework parse_framework(const std::string& text, const std::string& where);  // throws InputError

// PyTorch FSDP's options that change memory (fully_shard / FullyShardedDataParallel).
struct FsdpConfig {
  bool reshard_after_forward =
      true;  // false: SHARD_GRAD_OP, parameters kept from forward to backward
  // MixedPrecisionPolicy.reduce_dtype; unset: the parameter dtype (FSDP's default)
  std::optional<Precision> reduce_dtype;
};

// ColossalAI's ZeRO of the seed documents (v0.1.x: ShardedModelV2's model_config and
// ShardedOptimizerV2's optimizer_config; docs/seeds.md). Every parameter is sharded per tensor
// (shard_utils/commons.py get_shard) and gathered per module by ZeroHook.
// Tensor: one all-gather per tensor (TensorShardStrategy); BucketTensor: a module's shards
// flattened into one all-gather (BucketTensorShardStrategy).
enum class ShardStrategy : std::uint8_t { Tensor, BucketTensor };
// tensor_placement_policy: where held tensors live. Cuda: everything on the GPU. Cpu: parameter
// shards, gradients and optimizer states on the host, each shard moved to the GPU for its module.
// Auto: Gemini's StatefulTensorMgr moves parameter shards between the GPU and the host from the
// memory statistics of the first (warm-up) step; gradients and optimizer states on the host.
enum class PlacementPolicy : std::uint8_t { Cuda, Cpu, Auto };
const char* to_string(ShardStrategy strategy);     // "TensorShardStrategy", ...
const char* to_string(PlacementPolicy placement);  // "cuda", "cpu", "auto"
// Takes ColossalAI's class names and zerolens's flag values ("tensor", "bucket-tensor").
ShardStrategy parse_shard_strategy(const std::string& text, const std::string& where);
PlacementPolicy parse_placement_policy(const std::string& text, const std::string& where);

struct ColossalAiConfig {
  ShardStrategy shard_strategy = ShardStrategy::Tensor;
  PlacementPolicy placement = PlacementPolicy::Cuda;
  // The fp16 gradient shard replaces the parameter shard until the step (no fp32 copy); ColossalAI
  // asserts there is no gradient accumulation (sharded_model_v2.py _save_grad).
  bool reuse_fp16_shard = false;
  std::int64_t reduce_scatter_bucket_size_mb = 25;  // ReduceScatterBucketer's bucket, MiB
  bool fp32_reduce_scatter = false;
  // Auto only: the fraction of the GPU's margin (its capacity less the warm-up step's peak) in
  // which the optimizer's fp32 shards are placed (ShardedOptimizerV2 _maybe_move_fp32_shards).
  double gpu_margin_mem_ratio = 0;
};

struct TrainingConfig {
  Framework framework = Framework::DeepSpeed;
  FsdpConfig fsdp;  // FSDP profiles only
  ColossalAiConfig colossalai;  // the ColossalAI profile only
  // Tensor (and sequence) parallelism: DeepSpeed's tensor_parallel.autotp_size, --tp, --sp; ZeRO
  // runs over the data-parallel group of each TP coordinate (docs/parallelism.md).
  TensorParallelism tensor_parallel;
  // Pipeline parallelism: DeepSpeed's pipeline.stages, --pp, --virtual-stages, --pipeline-schedule.
  PipelineParallelism pipeline;
  // Expert parallelism of a mixture-of-experts model: DeepSpeed's MoE layer's ep_size,
  // capacity_factor and min_capacity (zerolens's "moe" block, --ep, --capacity-factor,
  // --min-capacity; docs/parallelism.md).
  ExpertParallelism expert_parallel;
  ZeroConfig zero;
  PrecisionConfig precision;
  BatchConfig batch;
  ActivationCheckpointingConfig activation_checkpointing;
  OptimizerConfig optimizer;
  double gradient_clipping = 0;
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  std::optional<std::int64_t> seq_len;  // not a DeepSpeed key: from the CLI or the model default
  // An encoder-decoder's target (decoder) sequence; unset: seq_len, the source's. Not a DeepSpeed
  // key: --target-seq-len.
  std::optional<std::int64_t> target_seq_len;

  // Checks cross-field rules (param offload below stage 3, nvme without nvme_path, ...). Throws
  // InputError naming the key.
  void validate() const;
  void validate_pipeline() const;
  void validate_expert_parallel() const;
  void validate_colossalai() const;
  void validate_delayed_update() const;
  bool is_fsdp() const { return framework == Framework::Fsdp2 || framework == Framework::Fsdp1; }
  bool is_colossalai() const { return framework == Framework::ColossalAi; }
  // GPUs of one data-parallel rank: a TP group on every pipeline stage.
  int model_parallel_size() const { return tensor_parallel.size * pipeline.size; }
  // The optimizer kernel the framework runs: as set, else fused under DeepSpeed, foreach under
  // FSDP.
  OptimizerKernel effective_optimizer_kernel() const;
  // The ZeRO settings the framework really runs with: DeepSpeed's as written; FSDP's coordinator
  // expressed in them (every parameter sharded, one unit prefetched, released after use, each
  // unit's gradients reduced alone, no flat reduce buffer); ColossalAI's ZeroHook (every parameter
  // sharded, gathered just before its module and released after it, no prefetch) with its
  // placement policy as the offload devices.
  ZeroConfig effective_zero() const;
  ZeroConfig colossalai_zero() const;
};

}  // namespace zerolens
