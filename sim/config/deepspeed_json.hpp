#pragma once
// A training config written back as a DeepSpeed document.
#include <nlohmann/json_fwd.hpp>

#include "sim/config/config.hpp"

namespace zerolens {

// The config written back in DeepSpeed's key names (round trip of what zerolens understood).
nlohmann::json to_deepspeed_json(const TrainingConfig& config);

}  // namespace zerolens
