#pragma once
// Hugging Face config.json of the encoder and encoder-decoder families (model_type bert, roberta,
// t5, mt5), read into a transformer shape (docs/model-format.md, "BERT, RoBERTa, T5").
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sim/core/error.hpp"
#include "sim/model/model.hpp"

namespace zerolens {

const std::vector<std::string>& encoder_families();  // bert, roberta, t5, mt5

// The shape of `config` when its model_type is one of encoder_families(), else nullopt. Throws
// InputError naming the config's key (under `where`) for a missing or bad value.
std::optional<TransformerShape> encoder_shape_from_hf(const nlohmann::json& config,
                                                      const std::string& where,
                                                      const std::string& type,
                                                      Diagnostics& diagnostics);

}  // namespace zerolens
