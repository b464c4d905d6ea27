#pragma once
// What a trace from a file must satisfy before it is drawn (the reader checks the schema; these are
// the bounds a drawing needs), and how it lines up with the plan made for its run.
#include <cstdint>
#include <string>
#include <vector>

#include "sim/trace/trace.hpp"

namespace zerolens::gui {

inline constexpr double kMaxTraceSeconds = 1e6;

// Throws InputError naming the op and key ("ops[3].duration_s: ...").
void check_trace_for_display(const Trace& trace);
// Notes for the user: op counts per rank against the schedule's, measured or predicted.
void add_comparison_notes(const Trace& trace, std::int64_t schedule_ops,
                          std::vector<std::string>& notes);
// The ops of one rank in the trace's order.
std::vector<const TraceOp*> ops_of_rank(const Trace& trace, int rank);

}  // namespace zerolens::gui
