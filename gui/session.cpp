#include "gui/session.hpp"

#include <QElapsedTimer>
#include <algorithm>

#include "gui/trace_checks.hpp"

namespace zerolens::gui {

std::unique_ptr<Planned> plan_settings(const Settings& settings) {
  PlanRequest request = make_request(settings);
  const int ranks = std::min(request.dp_size, kPredictedTraceRanks);
  Prediction prediction =
      predict(std::move(request), {.trace_ranks = ranks, .memory_states = true});
  auto planned = std::make_unique<Planned>();
  planned->plan = std::move(prediction.plan);
  planned->timeline = std::move(prediction.timeline);
  planned->predicted = std::move(prediction.trace);
  planned->states = std::move(prediction.memory.states);
  return planned;
}

Session::Session(Settings settings, QObject* parent)
    : QObject(parent), settings_(std::move(settings)) {}

Session::~Session() = default;

std::int64_t Session::op_count() const {
  return planned_ ? std::int64_t(planned_->plan.schedule.ops.size()) : 0;
}

int Session::world_size() const {
  if (!planned_) return 1;
  const ScheduleContext& c = planned_->plan.schedule.context;
  return c.dp_size * std::max(1, c.tensor_parallel);
}

int Session::job_gpus() const {
  if (!planned_) return 1;
  return world_size() * std::max(1, planned_->plan.schedule.context.pipeline_parallel);
}

bool Session::apply(Settings settings) {
  settings_ = std::move(settings);
  QElapsedTimer clock;
  clock.start();
  try {
    planned_ = plan_settings(settings_);
  } catch (const std::exception& error) {  // InputError, and overflow_error from checked sizes
    error_ = QString::fromStdString(error.what());
    emit planFailed(error_);
    return false;
  }
  plan_ms_ = double(clock.nsecsElapsed()) / 1e6;
  error_.clear();
  step_ = std::clamp<std::int64_t>(step_, -1, op_count() - 1);
  rank_ = std::clamp(rank_, 0, world_size() - 1);
  emit planChanged();  // views redraw the cursor with the plan: no separate stepChanged
  return true;
}

void Session::set_step(std::int64_t step) {
  const std::int64_t clamped = std::clamp<std::int64_t>(step, -1, op_count() - 1);
  if (clamped == step_) return;
  step_ = clamped;
  emit stepChanged(step_);
}

void Session::select_rank(int rank) {
  if (!planned_) return;
  const int clamped = std::clamp(rank, 0, world_size() - 1);
  if (clamped == rank_) return;
  rank_ = clamped;
  emit rankChanged(rank_);
}

void Session::load_trace(Trace trace, const std::string& path) {
  std::vector<std::string> notes;
  Settings settings;
  try {
    check_trace_for_display(trace);
    settings = settings_for_trace(settings_, trace.run, notes);
  } catch (const InputError& error) {
    throw InputError(path, error.what());
  }
  Settings previous = settings_;
  if (!apply(std::move(settings))) {
    const std::string why = error_.toStdString();
    apply(std::move(previous));
    throw InputError(path, "the trace's run cannot be planned: " + why);
  }
  const auto ops = std::int64_t(planned_->plan.schedule.ops.size());
  add_comparison_notes(trace, ops, notes);
  loaded_ = std::make_unique<LoadedTrace>(LoadedTrace{std::move(trace), path, std::move(notes)});
  emit traceChanged();
}

void Session::clear_trace() {
  if (!loaded_) return;
  loaded_.reset();
  emit traceChanged();
}

}  // namespace zerolens::gui
