#include "gui/trace_checks.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace zerolens::gui {
namespace {

std::string op_key(std::size_t i, const char* key) {
  return "ops[" + std::to_string(i) + "]." + key;
}

void check_seconds(double value, std::size_t i, const char* key) {
  if (!(std::isfinite(value) && value >= 0 && value <= kMaxTraceSeconds)) {
    throw InputError(op_key(i, key), "must be between 0 and 1e6 seconds");
  }
}

}  // namespace

void check_trace_for_display(const Trace& trace) {
  std::vector<int> ranks = trace.ranks;
  std::sort(ranks.begin(), ranks.end());
  const auto repeated = std::adjacent_find(ranks.begin(), ranks.end());
  if (repeated != ranks.end())
    throw InputError("ranks", "rank " + std::to_string(*repeated) + " is listed twice");
  for (std::size_t i = 0; i < trace.ops.size(); ++i) {
    const TraceOp& op = trace.ops[i];
    if (!std::binary_search(ranks.begin(), ranks.end(), op.rank)) {
      throw InputError(op_key(i, "rank"),
                       "rank " + std::to_string(op.rank) + " is not in \"ranks\"");
    }
    if (op.index < 0) throw InputError(op_key(i, "index"), "must not be negative");
    check_seconds(op.start, i, "start_s");
    check_seconds(op.duration, i, "duration_s");
    check_seconds(op.start + op.duration, i, "start_s + duration_s");
  }
}

void add_comparison_notes(const Trace& trace, std::int64_t schedule_ops,
                          std::vector<std::string>& notes) {
  const std::string what = trace.source == "exec" ? "measured" : "predicted";
  notes.push_back("loaded a " + what + " trace of " + std::to_string(trace.ranks.size()) +
                  " rank(s)");
  std::map<int, std::int64_t> ops_per_rank;
  for (const int rank : trace.ranks) ops_per_rank[rank] = 0;
  for (const auto& op : trace.ops) ++ops_per_rank[op.rank];
  for (const auto& [rank, ops] : ops_per_rank) {
    if (ops == schedule_ops) continue;
    notes.push_back("rank " + std::to_string(rank) + " of the trace has " + std::to_string(ops) +
                    " ops, the plan's schedule " + std::to_string(schedule_ops) +
                    ": ops are matched by their index where it exists");
    return;  // one such note says it; the timeline shows the rest
  }
}

std::vector<const TraceOp*> ops_of_rank(const Trace& trace, int rank) {
  std::vector<const TraceOp*> ops;
  for (const auto& op : trace.ops) {
    if (op.rank == rank) ops.push_back(&op);
  }
  return ops;
}

}  // namespace zerolens::gui
