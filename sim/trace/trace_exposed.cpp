// Where a trace's rank is exposed: its ops sorted into compute, collective and offload streams by
// name, then the timeline's own exposed_intervals (one definition for the simulated step and for
// any trace, measured ones included).
#include <algorithm>

#include "sim/trace/trace.hpp"

namespace zerolens {
namespace {

StreamClass stream_class(const std::string& stream) {
  if (stream == "compute") return StreamClass::Compute;
  static constexpr const char* kOffload[] = {"h2d", "d2h", "nvme", "cpu"};
  if (std::find(std::begin(kOffload), std::end(kOffload), stream) != std::end(kOffload))
    return StreamClass::Offload;
  return StreamClass::Communication;
}

}  // namespace

ExposedIntervals trace_exposed_intervals(const Trace& trace, int rank) {
  std::vector<BusyInterval> busy;
  for (const auto& op : trace.ops) {
    if (op.rank != rank || op.kind == "recv") continue;
    busy.push_back({stream_class(op.stream), op.start, op.start + op.duration});
  }
  return exposed_intervals(std::move(busy));
}

}  // namespace zerolens
