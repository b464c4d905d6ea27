#pragma once
// What a user sets on top of a config file: every config flag of `zerolens` and every control of
// the GUI's config panel, applied to a TrainingConfig by one function with one set of rules. The
// CLI reads a file with them (parse_training_config), the GUI applies each edit with them.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sim/config/config.hpp"

namespace zerolens {

struct ConfigOverrides {
  // Which framework runs the step, and FSDP's options (not DeepSpeed keys). An FSDP framework
  // without a stage given plans stage 3 (FULL_SHARD).
  std::optional<Framework> framework;
  std::optional<bool> reshard_after_forward;
  std::optional<Precision> reduce_dtype;
  std::optional<OptimizerKernel> optimizer_kernel;  // fused|foreach|for-loop (--optimizer-kernel)
  // ColossalAI's ShardedModelV2 (zero.model_config): --shard-strategy, --placement,
  // --reuse-fp16-shard. ColossalAI without a precision given plans fp16.
  std::optional<ShardStrategy> shard_strategy;
  std::optional<PlacementPolicy> placement;
  std::optional<bool> reuse_fp16_shard;
  // ZeRO-Offload's delayed parameter update: zero_optimization.delay_param_update (the DPU fork's
  // key) and its warm-up steps (zerolens's delay_param_update_warmup): --delayed-param-update,
  // --dpu-warmup.
  std::optional<bool> delayed_param_update;
  std::optional<std::int64_t> delayed_param_update_warmup;
  // zero_optimization
  std::optional<int> stage;
  std::optional<OffloadDevice> offload_optimizer, offload_param;
  std::optional<std::string> nvme_path;  // of both offload blocks
  std::optional<bool> pin_memory;        // of both offload blocks
  // Element counts as users write them (5e8), checked as the keys they set are.
  std::optional<double> reduce_bucket_size, allgather_bucket_size, prefetch_bucket_size,
      param_persistence_threshold, max_live_parameters, max_reuse_distance, sub_group_size;
  std::optional<bool> overlap_comm, contiguous_gradients, reduce_scatter;
  std::optional<std::string> reduce_buffers_at;  // "first-hook" or "backward"
  // Batch sizes. One given replaces those it conflicts with unless they are given too: the
  // micro-batch or the accumulation steps let train_batch_size follow, train_batch_size alone
  // lets the micro-batch follow.
  std::optional<std::int64_t> micro_batch, grad_accum, train_batch;
  // The micro-batch when neither the document nor these name a batch size (the CLI's 1).
  std::optional<std::int64_t> micro_batch_if_unset;
  std::optional<std::int64_t> seq_len;  // not a DeepSpeed key; 0: the model's default
  std::optional<std::int64_t> target_seq_len;  // encoder-decoders' target; 0: seq_len
  // Tensor parallelism (tensor_parallel.autotp_size) and sequence parallelism (not a DeepSpeed
  // key).
  std::optional<int> tensor_parallel;
  std::optional<bool> sequence_parallel;
  // Pipeline parallelism (pipeline.stages) and its schedule (not DeepSpeed keys: its engine runs
  // 1F1B with one chunk per stage).
  std::optional<int> pipeline_parallel, virtual_stages;
  // Hybrid sharding: zero_optimization.mics_shard_size (FSDP: HSDP's shard group).
  std::optional<int> shard_group;
  // ZeRO++: zero_optimization.zero_hpz_partition_size, zero_quantized_weights,
  // zero_quantized_gradients.
  std::optional<int> hpz_partition_size;
  std::optional<bool> quantized_weights, quantized_gradients;
  std::optional<PipelineSchedule> pipeline_schedule;
  // Expert parallelism of a MoE model: moe.ep_size, moe.capacity_factor, moe.min_capacity (the
  // arguments of DeepSpeed's MoE layer; zerolens's keys).
  std::optional<int> expert_parallel, min_capacity;
  std::optional<double> capacity_factor;
  std::optional<Precision> precision;
  std::optional<std::string>
      optimizer;  // optimizer.type as DeepSpeed names it (Adam, FusedAdam, ...)
  std::optional<double> momentum;
  // Off clears the block (the CLI) or only switches it off (the GUI: see OverridePolicy);
  // either sub-option switches checkpointing on, as writing its key creates the block.
  std::optional<bool> activation_checkpointing, cpu_checkpointing, partition_activations;
  // Any DeepSpeed key, "dotted.key=value" (the value parsed as JSON, else taken as a string),
  // applied last, over the typed fields.
  std::vector<std::string> set;
};

// How apply_overrides settles what a stage or device choice leaves inconsistent.
enum class OverridePolicy {
  // Leave it to TrainingConfig::validate(), which names the key: an explicit bad combination is
  // an error (the CLI).
  Strict,
  // The GUI's controls: changing the stage clears the offloads the new stage does not allow
  // (unless given with it), an NVMe offload without a path gets "/local_nvme", and switching
  // checkpointing off keeps its sub-options for when it is switched on again.
  Interactive,
};

// Applies `overrides` to `config`: the typed fields, then `set` read as DeepSpeed keys onto the
// result ("auto" sizes need `hidden_size`; unknown keys are warned). Does not validate. Throws
// InputError naming the key.
void apply_overrides(TrainingConfig& config, const ConfigOverrides& overrides,
                     Diagnostics& diagnostics,
                     std::optional<std::int64_t> hidden_size = std::nullopt,
                     OverridePolicy policy = OverridePolicy::Strict);

// The document without the keys `overrides` replace, so that a value the user replaces is
// neither read nor warned about.
nlohmann::json without_overridden_keys(const nlohmann::json& document,
                                       const ConfigOverrides& overrides);

// NVMe offload blocks without an nvme_path get "/local_nvme", so a variant or a GUI edit that
// picks NVMe validates.
void give_nvme_offload_a_path(ZeroConfig& zero);

// Detects the flavour ("zero" with "level" -> ColossalAI, else DeepSpeed) and parses.
TrainingConfig parse_training_config(const nlohmann::json& json, Diagnostics& diagnostics,
                                     std::optional<std::int64_t> hidden_size = std::nullopt);
// The same with the user's flags or GUI edits on top (sim/config/overrides.hpp): a key they replace
// is not read from the document, and the config is validated once, with them applied.
TrainingConfig parse_training_config(const nlohmann::json& json, Diagnostics& diagnostics,
                                     std::optional<std::int64_t> hidden_size,
                                     const ConfigOverrides& overrides);

}  // namespace zerolens
