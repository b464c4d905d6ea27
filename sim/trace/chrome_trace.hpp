#pragma once
// A trace in the Chrome Trace Event Format.
#include <nlohmann/json_fwd.hpp>

#include "sim/trace/trace.hpp"

namespace zerolens {

// Chrome Trace Event Format (opens in Perfetto): a process per rank, a thread per stream, complete
// events ("ph": "X") with ts/dur in microseconds, and counter tracks ("ph": "C") of memory per
// device.
nlohmann::json chrome_trace_json(const Trace& trace);

}  // namespace zerolens
