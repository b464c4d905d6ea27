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

// The planned stage's timeline, run with every other stage of the pipeline (their receives wait
// for each other's sends).
Timeline simulate_pipeline_stage(const Plan& plan, const MemoryTimeline& planned_replay,
                                 const TimelineOptions& options) {
  std::vector<const Schedule*> schedules;
  std::vector<const Model*> models;
  std::vector<MemoryTimeline> replays;
  for (std::size_t s = 0; s < plan.pipeline_stages.size(); ++s) {
    const bool planned = int(s) == plan.pipeline_stage;
    schedules.push_back(planned ? &plan.schedule : &plan.pipeline_stages[s].schedule);
    models.push_back(planned ? &plan.rank_model : &plan.pipeline_stages[s].model);
    replays.push_back(planned
                          ? planned_replay
                          : replay_memory(plan.pipeline_stages[s].schedule, ReplayDetail::PerOp));
  }
  auto timelines = simulate_pipeline(schedules, models, plan.request.cluster, options, replays);
  return std::move(timelines[std::size_t(plan.pipeline_stage)]);
}

void simulate(Prediction& prediction, const PredictionOptions& options) {
  const bool wanted = options.simulate == Simulate::Always ||
                      (options.simulate == Simulate::IfFits && prediction.plan.fits());
  if (!wanted) return;
  const Plan& plan = prediction.plan;
  if (plan.pipeline_stages.empty()) {
    prediction.timeline = simulate_timeline(plan.schedule, plan.rank_model, plan.request.cluster,
                                            options.timeline, prediction.memory);
  } else {
    prediction.timeline = simulate_pipeline_stage(plan, prediction.memory, options.timeline);
  }
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
