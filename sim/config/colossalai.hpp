#pragma once
// ColossalAI's ZeRO configs, read so one reader reads them with DeepSpeed's:
// - zero = dict(level, offload_optimizer_config, offload_param_config, ...) (seed 000, the
//   DeepSpeed-backed ZeRO of ColossalAI 0.0.x) as the DeepSpeed document it means;
// - zero = dict(model_config=dict(shard_strategy, tensor_placement_policy, reuse_fp16_shard, ...),
//   optimizer_config=dict(gpu_margin_mem_ratio, initial_scale, ...)) (seed 002, ShardedModelV2 and
//   ShardedOptimizerV2 of ColossalAI 0.1.x) as the ColossalAI framework profile.
#include <nlohmann/json.hpp>

#include "sim/config/config.hpp"
#include "sim/core/error.hpp"

namespace zerolens {

// True for a document with zero = {"level": ...} or zero = {"model_config": ...,
// "optimizer_config": ...}.
bool is_colossalai_document(const nlohmann::json& document);
// The second form (ShardedModelV2's).
bool is_sharded_model_v2_document(const nlohmann::json& document);

// The DeepSpeed document of a `level` config: zero.level as zero_optimization.stage, the offload
// blocks, fp16 always on, clip_grad as gradient_clipping; other top-level keys as they are.
// Throws InputError naming the zero key.
nlohmann::json colossalai_as_deepspeed(const nlohmann::json& document, Diagnostics& diagnostics);

// Reads either form onto `config` (not validated). Throws InputError naming the key: an unknown
// model_config or optimizer_config argument (ShardedModelV2(**model_config) raises TypeError),
// a missing shard_strategy, fp16 beside zero (colossalai.initialize raises ConfigException).
void read_colossalai_onto(const nlohmann::json& document, Diagnostics& diagnostics,
                          TrainingConfig& config);

// Parses and validates either form.
TrainingConfig parse_colossalai_config(const nlohmann::json& json, Diagnostics& diagnostics);

}  // namespace zerolens
