// Fuzzes the model readers (Hugging Face config.json and the layer-list JSON): any input either
// builds a model with a positive parameter count or raises InputError; layer lists round trip.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/model/layers_json.hpp"
#include "sim/model/model_io.hpp"
#include "tests/fuzz/fuzz_input.hpp"

namespace {

void check(const zerolens::Model& model) {
  if (model.parameter_count() <= 0) std::abort();
  for (const auto& layer : model.layers) (void)layer.activation_bytes(1, 16, 2);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::optional<nlohmann::json> parsed = zerolens::fuzzing::strict_document(data, size);
  if (!parsed) return 0;
  const nlohmann::json& document = *parsed;
  zerolens::Diagnostics diagnostics;
  try {
    check(zerolens::model_from_hf_config(document, diagnostics, "config.json"));
  } catch (const zerolens::InputError&) {
  }
  try {
    const zerolens::Model model = zerolens::model_from_layers_json(document, diagnostics, "model.json");
    check(model);
    const auto copy = zerolens::model_from_layers_json(zerolens::model_to_json(model), diagnostics, "copy");
    if (copy.parameter_count() != model.parameter_count()) std::abort();
    if (copy.trainable_parameter_count() != model.trainable_parameter_count()) std::abort();
  } catch (const zerolens::InputError&) {
  }
  return 0;
}
