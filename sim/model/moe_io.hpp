#pragma once
// The mixture-of-experts families of Hugging Face config.json (docs/model-format.md): Mixtral,
// Qwen2-MoE, Qwen3-MoE, DeepSeek-V2 and V3. Their attention and dense layers are read as the
// LLaMA-like family they extend (model_io.cpp); this reads what they add.
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "sim/core/error.hpp"
#include "sim/model/model.hpp"

namespace zerolens {

// The LLaMA-like family whose keys and defaults a MoE family's attention follows ("mistral" for
// "mixtral", "qwen2" for "qwen2_moe", "qwen3" for "qwen3_moe", "llama" for "deepseek_v2" and
// "deepseek_v3"); empty for any other model_type.
std::string mixture_base_family(const std::string& model_type);

// Reads the MoE (and for DeepSeek the MLA) keys of `config` into `shape`, read before as its base
// family. Errors name the config's keys under `where`.
void read_mixture(const nlohmann::json& config, const std::string& where,
                  const std::string& model_type, TransformerShape& shape, Diagnostics& diagnostics);

}  // namespace zerolens
