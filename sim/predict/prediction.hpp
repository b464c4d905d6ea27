#pragma once
// One prediction of a training step: the plan (memory per device and category, traffic per link),
// the memory after every op, the simulated timeline and the predicted trace, all from one schedule
// and one replay of its memory. What the CLI commands and the GUI show.
#include "sim/plan/plan.hpp"
#include "sim/schedule/memory_replay.hpp"
#include "sim/timeline/timeline.hpp"
#include "sim/trace/trace.hpp"

namespace zerolens {

enum class Simulate {
  Never,   // memory and traffic only (a plan)
  IfFits,  // the timeline only when the plan fits (the sweep ranks only those)
  Always,
};

struct PredictionOptions {
  TimelineOptions timeline;
  Simulate simulate = Simulate::Always;
  int trace_ranks = 0;  // ranks the predicted trace records (0: no trace); needs the timeline
  bool memory_states = false;  // the memory by component at every moment (MemoryTimeline::states)
};

struct Prediction {
  Plan plan;
  MemoryTimeline memory;  // the one replay: the peaks, the totals after every op when simulated,
                          // the states by component when asked
  bool simulated = false;
  Timeline timeline;  // when simulated
  Trace trace;        // when simulated and trace_ranks > 0
};

// Plans the request and predicts its step. Throws InputError (the plan's, the timeline's: a GPU
// without the precision, a cluster without a rate; the trace's: ranks beyond the data-parallel
// size).
Prediction predict(PlanRequest request, const PredictionOptions& options = {});
// The prediction of a plan made already (the executor's, with its notes): its figures stay, the
// schedule's memory is replayed once for the rest.
Prediction predict(Plan plan, const PredictionOptions& options = {});

}  // namespace zerolens
