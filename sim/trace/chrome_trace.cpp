// Chrome Trace Event Format export (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
// "X" complete events with ts/dur in microseconds, "M" metadata naming processes and threads, and
// "C" counter events for memory, which Perfetto draws as tracks.
#include <algorithm>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/trace/chrome_trace.hpp"

namespace zerolens {
namespace {

using nlohmann::json;

constexpr double kMicroseconds = 1e6;

int stream_tid(const std::string& stream) {
  static const std::map<std::string, int> ids = {{"compute", 1}, {"collective", 2}, {"h2d", 3},
                                                 {"d2h", 4},     {"nvme", 5},       {"cpu", 6},
                                                 {"tp", 7},      {"pp", 8},         {"ep", 9}};
  const auto it = ids.find(stream);
  return it == ids.end() ? 10 : it->second;
}

std::string event_name(const TraceOp& op) {
  return op.layer_name.empty() ? op.kind : op.kind + " " + op.layer_name;
}

void add_metadata(json& events, const Trace& trace) {
  for (const int rank : trace.ranks) {
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"tid", 0},
                      {"args", {{"name", "rank " + std::to_string(rank)}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank}, {"tid", 0},
                      {"args", {{"sort_index", rank}}}});
    for (const char* stream :
         {"compute", "collective", "h2d", "d2h", "nvme", "cpu", "tp", "pp", "ep"}) {
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", stream_tid(stream)},
                        {"args", {{"name", stream}}}});
    }
  }
}

// Each rank's memory after each op, in program order at the time the state holds (memory_times):
// at each op's own end, an op that ran ahead on another stream would show later ops' states early.
void add_memory_counters(json& events, const Trace& trace) {
  std::map<int, std::vector<const TraceOp*>> by_rank;
  for (const auto& op : trace.ops) by_rank[op.rank].push_back(&op);
  for (auto& [rank, ops] : by_rank) {
    std::stable_sort(ops.begin(), ops.end(),
                     [](const TraceOp* a, const TraceOp* b) { return a->index < b->index; });
    std::vector<OpTiming> timings;
    for (const TraceOp* op : ops) timings.push_back({op->start, op->duration});
    const std::vector<double> times = memory_times(timings);
    for (std::size_t k = 0; k < ops.size(); ++k) {
      const auto& after = ops[k]->memory_after;
      events.push_back({{"ph", "C"},
                        {"name", "memory (bytes)"},
                        {"pid", rank},
                        {"ts", times[k] * kMicroseconds},
                        {"args", {{"gpu", after[0]}, {"cpu", after[1]}, {"nvme", after[2]}}}});
    }
  }
}

}  // namespace

json chrome_trace_json(const Trace& trace) {
  json events = json::array();
  add_metadata(events, trace);
  for (const auto& op : trace.ops) {
    json args = {{"bytes", op.bytes}, {"flops", op.flops}, {"phase", op.phase}, {"micro_step", op.micro_step}};
    if (op.bucket >= 0) args["bucket"] = op.bucket;
    if (op.link != "none") args["link"] = op.link;
    events.push_back({{"ph", "X"},
                      {"name", event_name(op)},
                      {"cat", op.stream},
                      {"pid", op.rank},
                      {"tid", stream_tid(op.stream)},
                      {"ts", op.start * kMicroseconds},
                      {"dur", op.duration * kMicroseconds},
                      {"args", args}});
  }
  add_memory_counters(events, trace);
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"},
          {"otherData", {{"schema", "zerolens.trace"}, {"source", trace.source}, {"model", trace.run.model},
                         {"stage", trace.run.stage}, {"dp_size", trace.run.dp_size}}}};
}

}  // namespace zerolens
