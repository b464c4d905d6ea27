// Fuzzes the DeepSpeed/ColossalAI config parser: any input either parses or raises InputError, and
// whatever parses writes back to DeepSpeed JSON that parses to the same document.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/config/config.hpp"
#include "sim/config/deepspeed.hpp"
#include "sim/config/deepspeed_json.hpp"
#include "sim/config/overrides.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::optional<nlohmann::json> parsed = zerolens::fuzzing::strict_document(data, size);
  if (!parsed) return 0;
  const nlohmann::json& document = *parsed;
  for (const std::optional<std::int64_t> hidden : {std::optional<std::int64_t>(), std::optional<std::int64_t>(4096)}) {
    zerolens::Diagnostics diagnostics;
    try {
      const zerolens::TrainingConfig config = zerolens::parse_training_config(document, diagnostics, hidden);
      const nlohmann::json written = zerolens::to_deepspeed_json(config);
      const nlohmann::json rewritten = zerolens::to_deepspeed_json(zerolens::parse_deepspeed_config(written, diagnostics));
      if (written != rewritten) std::abort();
      if (config.batch.micro_batch_per_gpu || config.batch.train_batch_size) (void)zerolens::resolve_batch(config.batch, 8);
    } catch (const zerolens::InputError&) {
    }
  }
  return 0;
}
