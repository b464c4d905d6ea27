#pragma once
// The executor's counts in a trace's summary, all optional (traces/README.md): `category_highs`
// (per device and memory category), `collectives` (calls and bytes per collective kind) and
// `link_bytes` (host-device and NVMe). Read with errors that name the key.
#include <nlohmann/json_fwd.hpp>

#include "sim/trace/trace.hpp"

namespace zerolens {

// Adds the counts `summary` has to `object` (the summary's JSON).
void write_summary_counts(const TraceSummary& summary, nlohmann::json& object);
// Reads the counts present in `object` (the summary's JSON) into `summary`.
void read_summary_counts(const nlohmann::json& object, TraceSummary& summary);

}  // namespace zerolens
