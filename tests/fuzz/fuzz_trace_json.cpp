// Fuzzes the trace reader (schema zerolens.trace): any input either yields a trace or raises
// InputError; a trace read back from its own JSON is the same document, and its Chrome export
// never fails.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/trace/chrome_trace.hpp"
#include "sim/trace/trace.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::optional<nlohmann::json> parsed = zerolens::fuzzing::strict_document(data, size);
  if (!parsed) return 0;
  const nlohmann::json& document = *parsed;
  try {
    const zerolens::Trace trace = zerolens::trace_from_json(document);
    const nlohmann::json written = zerolens::trace_to_json(trace);
    if (zerolens::trace_to_json(zerolens::trace_from_json(written)) != written) std::abort();
    (void)zerolens::chrome_trace_json(trace).dump();
  } catch (const zerolens::InputError&) {
  }
  return 0;
}
