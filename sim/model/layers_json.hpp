#pragma once
// The explicit layer-list JSON of docs/model-format.md, read and written.
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "sim/core/error.hpp"
#include "sim/model/model.hpp"

namespace zerolens {

// `name` is used for the model name and in error messages (usually the file path).
Model model_from_layers_json(const nlohmann::json& document, Diagnostics& diagnostics,
                             const std::string& name);
// The layer-list JSON of any model (round trips through model_from_layers_json).
nlohmann::json model_to_json(const Model& model);

}  // namespace zerolens
