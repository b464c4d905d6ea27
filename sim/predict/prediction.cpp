// predict(): the plan, the replay, the timeline and the trace in that order, each from the one
// before, so the schedule is built once and its memory replayed once.
#include "sim/predict/prediction.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens {
namespace {

ReplayDetail detail_for(const PredictionOptions& options) {
  if (options.memory_states) return ReplayDetail::Components;
  return options.simulate == Simulate::Never ? ReplayDetail::Peaks : ReplayDetail::PerOp;
}

void simulate(Prediction& prediction, const PredictionOptions& options) {
  const bool wanted = options.simulate == Simulate::Always ||
                      (options.simulate == Simulate::IfFits && prediction.plan.fits());
  if (!wanted) return;
  const Plan& plan = prediction.plan;
  prediction.timeline = simulate_timeline(plan.schedule, plan.rank_model, plan.request.cluster,
                                          options.timeline, prediction.memory);
  prediction.simulated = true;
  if (options.trace_ranks > 0) {
    prediction.trace =
        make_trace(plan, prediction.timeline, prediction.memory, options.trace_ranks);
  }
}

}  // namespace

Prediction predict(PlanRequest request, const PredictionOptions& options) {
  Prediction prediction;
  prediction.plan = make_plan(std::move(request), detail_for(options), prediction.memory);
  simulate(prediction, options);
  return prediction;
}

Prediction predict(Plan plan, const PredictionOptions& options) {
  Prediction prediction;
  prediction.memory = replay_memory(plan.schedule, detail_for(options));
  prediction.plan = std::move(plan);
  simulate(prediction, options);
  return prediction;
}

}  // namespace zerolens
