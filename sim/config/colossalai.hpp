#pragma once
// ColossalAI's ZeRO config as the DeepSpeed document it means, so one reader reads both.
#include <nlohmann/json.hpp>

#include "sim/config/config.hpp"
#include "sim/core/error.hpp"

namespace zerolens {

// True for a document with zero = {"level": ...}.
bool is_colossalai_document(const nlohmann::json& document);

// The DeepSpeed document of a ColossalAI config: zero.level as zero_optimization.stage, the
// offload blocks, fp16 always on, clip_grad as gradient_clipping; other top-level keys as they
// are. Throws InputError naming the zero key.
nlohmann::json colossalai_as_deepspeed(const nlohmann::json& document, Diagnostics& diagnostics);

// Parses ColossalAI fields written as JSON: {"zero": {"level": 3, "offload_optimizer_config":
// {...}, "offload_param_config": {...}}, "fp16": {...}, ...}.
TrainingConfig parse_colossalai_config(const nlohmann::json& json, Diagnostics& diagnostics);

}  // namespace zerolens
