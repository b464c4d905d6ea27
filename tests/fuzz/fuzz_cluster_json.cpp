// Fuzzes the cluster JSON reader: any input either yields a valid cluster or raises InputError,
// and a valid cluster round trips through its JSON form.
#include <cstdint>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "sim/hardware/cluster_json.hpp"
#include "sim/hardware/hardware.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto document = nlohmann::json::parse(data, data + size, nullptr, false);
  if (document.is_discarded()) return 0;
  zerolens::Diagnostics diagnostics;
  try {
    const zerolens::Cluster cluster = zerolens::cluster_from_json(document, diagnostics);
    const nlohmann::json written = zerolens::cluster_to_json(cluster);
    if (zerolens::cluster_to_json(zerolens::cluster_from_json(written, diagnostics)) != written) std::abort();
  } catch (const zerolens::InputError&) {
  }
  return 0;
}
