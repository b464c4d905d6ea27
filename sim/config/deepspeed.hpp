#pragma once
// Reading DeepSpeed keys onto a training config: the step shared by the parsers
// (parse_deepspeed_config below, parse_training_config in overrides.hpp: a file read onto the
// defaults) and apply_overrides (--set keys read onto a config). Readers take the keys a document
// has and leave the config's values for the keys it lacks; validation and the warnings about the
// whole config come once, at the end (finish_training_config).
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "sim/config/config.hpp"

namespace zerolens {

// The largest element count a size key takes (exactly representable as a JSON double).
inline constexpr std::int64_t kMaxConfigElements = std::int64_t(1) << 53;
// The largest batch size a batch key takes.
inline constexpr std::int64_t kMaxConfigBatch = std::int64_t(1) << 40;

// Reads the keys of `document` onto `config`; "auto" sizes need `hidden_size`. Throws InputError
// naming the key; unknown keys are warned.
void read_deepspeed_onto(const nlohmann::json& document, Diagnostics& diagnostics,
                         std::optional<std::int64_t> hidden_size, TrainingConfig& config);

// Warns about options that have no effect in the config as a whole, then validates it.
void finish_training_config(const TrainingConfig& config, Diagnostics& diagnostics);

// DeepSpeed's optimizer names (Adam, FusedAdam, CPUAdam, AdamW, SGD; any case). Throws InputError
// naming optimizer.type.
OptimizerType parse_optimizer_type(const std::string& text);

// Parses a DeepSpeed config. Unknown keys are warned with the closest valid name; "auto" values
// are resolved as the Hugging Face integration does when `hidden_size` is given (else an error).
TrainingConfig parse_deepspeed_config(const nlohmann::json& json, Diagnostics& diagnostics,
                                      std::optional<std::int64_t> hidden_size = std::nullopt);
// Applies "dotted.key=value" overrides to a DeepSpeed-style JSON document before parsing
// (value parsed as JSON, else taken as a string). Throws InputError for malformed overrides.
void apply_override(nlohmann::json& json, const std::string& assignment);

}  // namespace zerolens
