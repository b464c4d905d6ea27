#pragma once
// The state every view draws from: the settings, the plan made from them (schedule, memory per op,
// simulated timeline, predicted trace), a trace loaded from a file, the step cursor and the
// selected rank. Views listen to its signals; nothing here computes a figure the plan does not
// have.
#include <QObject>
#include <QString>
#include <memory>
#include <string>
#include <vector>

#include "gui/settings.hpp"
#include "sim/predict/prediction.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens::gui {

// Ranks a predicted trace records (ranks are symmetric; more only repeat the same ops).
inline constexpr int kPredictedTraceRanks = 8;

struct Planned {
  Plan plan;
  Timeline timeline;
  Trace predicted;                           // make_trace of min(dp, kPredictedTraceRanks) ranks
  std::vector<DeviceComponentBytes> states;  // MemoryTimeline::states: before op 0, after each op
  // Memory by component at the cursor: after op `step`, before the first op for step -1.
  const DeviceComponentBytes& state_at(std::int64_t step) const {
    return states.at(std::size_t(step + 1));
  }
};

struct LoadedTrace {
  Trace trace;
  std::string path;
  std::vector<std::string> notes;  // how the trace relates to the plan made for it
};

class Session : public QObject {
  Q_OBJECT

 public:
  explicit Session(Settings settings, QObject* parent = nullptr);
  ~Session() override;

  const Settings& settings() const { return settings_; }
  const Planned* planned() const { return planned_.get(); }  // null until a plan succeeded
  const LoadedTrace* loaded() const { return loaded_.get(); }
  std::int64_t step() const { return step_; }
  std::int64_t op_count() const;
  int selected_rank() const { return rank_; }
  double plan_milliseconds() const { return plan_ms_; }
  const QString& error() const { return error_; }

  // Re-plans. On failure the previous plan stays on screen and planFailed names the problem.
  bool apply(Settings settings);
  void set_step(std::int64_t step);  // clamped to [-1, ops - 1]
  void select_rank(int rank);        // clamped to [0, dp x tp - 1]
  int world_size() const;            // the ranks the views draw: dp x tp (1 before a plan)
  int job_gpus() const;              // every GPU of the job: dp x tp x pp (1 before a plan)
  // Re-plans the run the trace records and shows the trace beside the prediction. Throws
  // InputError when the trace cannot be shown (the current plan stays).
  void load_trace(Trace trace, const std::string& path);
  void clear_trace();

 signals:
  void planChanged();  // the cursor may have moved too (clamped to the new ops)
  void planFailed(const QString& message);
  void stepChanged(qint64 step);
  void rankChanged(int rank);
  void traceChanged();

 private:
  Settings settings_;
  std::unique_ptr<Planned> planned_;
  std::unique_ptr<LoadedTrace> loaded_;
  std::int64_t step_ = -1;
  int rank_ = 0;
  double plan_ms_ = 0;
  QString error_;
};

// Plans the settings: plan, timeline, predicted trace and memory per op (sim's predict()). Throws
// InputError.
std::unique_ptr<Planned> plan_settings(const Settings& settings);

}  // namespace zerolens::gui
