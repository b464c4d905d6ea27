#pragma once
// Models from files: Hugging Face config.json (GPT-2, LLaMA, Mistral families) and the explicit
// layer-list JSON of docs/model-format.md; and the dispatcher behind --model.
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "sim/core/error.hpp"
#include "sim/model/model.hpp"

namespace zerolens {

// `name` is used for the model name and in error messages (usually the file path).
Model model_from_hf_config(const nlohmann::json& config, Diagnostics& diagnostics,
                           const std::string& name);

// A preset name, dense:<N>, or a path to a JSON file (HF config or layer list).
Model load_model(const std::string& spec, Diagnostics& diagnostics);

// The same transformer with another attention implementation (activation memory changes).
// Throws InputError for models without a transformer shape.
Model with_attention(const Model& model, AttentionImpl impl);
// The same transformer with another dropout probability: 0 drops the dropout masks and outputs
// from the activations (models trained without dropout, as most LLMs are).
Model with_dropout(const Model& model, double probability);

}  // namespace zerolens
