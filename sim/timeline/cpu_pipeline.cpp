#include "sim/timeline/cpu_pipeline.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

#include "sim/timeline/cpu_ranks.hpp"

namespace zerolens {
namespace {

using SendKey = std::tuple<Phase, std::int32_t, std::int32_t>;  // phase, micro-step, chunk

SendKey send_key(const Op& op) {
  return {op.phase, op.micro_step, op.chunk};
}

// One stage's progress: the op it runs (its fixed part first, then its own work) or waits in.
struct StageState {
  std::size_t next = 0;  // the op running or about to start
  bool running = false;
  double start = 0;  // of the op running; a receive starts where the op before it ended
  double previous_end = 0;
  double fixed_left = 0;
  double work_left = 0;  // seconds alone on the node
  bool working() const { return running && fixed_left <= 0 && work_left > 0; }
};

class CpuPipeline {
 public:
  CpuPipeline(std::span<const Schedule* const> stages, std::span<const Model* const> models,
              const Cluster& cluster)
      : stages_(stages),
        models_(models),
        cluster_(cluster),
        states_(stages.size()),
        timings_(stages.size()) {
    for (std::size_t s = 0; s < stages.size(); ++s) timings_[s].resize(stages[s]->ops.size());
    const ScheduleContext& context = stages.front()->context;
    const int node = std::max(1, context.ranks_per_node());
    stage_ranks_ = std::max(1, context.tensor_parallel * context.dp_size);
    stages_per_node_ = std::max(1, node / stage_ranks_);
    stage_ranks_on_node_ = std::min(stage_ranks_, node);
  }

  std::vector<std::vector<OpTiming>> run() {
    while (true) {
      start_or_finish_ready_ops();
      if (all_done()) return std::move(timings_);
      advance_to_next_event();
    }
  }

 private:
  bool all_done() const {
    for (std::size_t s = 0; s < states_.size(); ++s) {
      if (states_[s].next < stages_[s]->ops.size()) return false;
    }
    return true;
  }

  // Starts every op that can start now and ends every op with nothing left, until none can.
  void start_or_finish_ready_ops() {
    for (bool moved = true; moved;) {
      moved = false;
      for (std::size_t s = 0; s < states_.size(); ++s) moved = step_stage(s) || moved;
    }
  }

  bool step_stage(std::size_t s) {
    StageState& state = states_[s];
    const Schedule& schedule = *stages_[s];
    if (state.next >= schedule.ops.size()) return false;
    const Op& op = schedule.ops[state.next];
    if (!state.running) {
      if (op.kind == OpKind::Recv && !sent(op)) return false;  // waits: not at work
      const CpuOpCost cost = cpu_rank_op_cost(op, schedule, *models_[s], cluster_);
      state.running = true;
      state.start = state.previous_end;
      state.fixed_left = cost.fixed;
      state.work_left = cost.work;
    }
    if (state.fixed_left > 0 || state.work_left > 0) return false;
    timings_[s][state.next] = {state.start, now_ - state.start};
    if (op.kind == OpKind::Send) sends_[send_key(op)] = now_;
    state.running = false;
    state.previous_end = now_;
    ++state.next;
    return true;
  }

  bool sent(const Op& op) const {
    if (op.peer_stage < 0 || std::size_t(op.peer_stage) >= stages_.size()) {
      throw std::logic_error("pipeline receive from stage " + std::to_string(op.peer_stage) +
                             " of " + std::to_string(stages_.size()));
    }
    return sends_.contains(send_key(op));
  }

  // The share of the cores of stage s's node: its ranks and those of the stages beside it on the
  // node (ranks numbered TP, then DP, then stages) that are at work now.
  double share_of(std::size_t s) const {
    const std::size_t first = s / std::size_t(stages_per_node_) * std::size_t(stages_per_node_);
    const std::size_t last = std::min(states_.size(), first + std::size_t(stages_per_node_));
    int busy = 0;
    for (std::size_t t = first; t < last; ++t)
      busy += states_[t].working() ? stage_ranks_on_node_ : 0;
    return cpu_share_of(std::max(busy, 1), cluster_);
  }

  void advance_to_next_event() {
    std::vector<double> shares(states_.size(), 1);
    double step = std::numeric_limits<double>::infinity();
    for (std::size_t s = 0; s < states_.size(); ++s) {
      const StageState& state = states_[s];
      if (!state.running) continue;
      if (state.fixed_left > 0) {
        step = std::min(step, state.fixed_left);
        continue;
      }
      shares[s] = share_of(s);
      step = std::min(step, state.work_left * shares[s]);
    }
    if (!(step < std::numeric_limits<double>::infinity())) {
      throw std::logic_error("a pipeline stage waits for a send no stage makes");
    }
    for (std::size_t s = 0; s < states_.size(); ++s) {
      StageState& state = states_[s];
      if (!state.running) continue;
      // What is left below a femtosecond is rounding: the op ends now.
      if (state.fixed_left > 0) {
        state.fixed_left -= step;
        if (state.fixed_left < kRounding) state.fixed_left = 0;
      } else {
        state.work_left -= step / shares[s];
        if (state.work_left < kRounding) state.work_left = 0;
      }
    }
    now_ += step;
  }

  std::span<const Schedule* const> stages_;
  std::span<const Model* const> models_;
  const Cluster& cluster_;
  std::vector<StageState> states_;
  std::vector<std::vector<OpTiming>> timings_;
  std::map<SendKey, double> sends_;  // end of each send, by what it carries
  static constexpr double kRounding = 1e-15;
  double now_ = 0;
  int stage_ranks_ = 1, stages_per_node_ = 1, stage_ranks_on_node_ = 1;
};

}  // namespace

std::vector<std::vector<OpTiming>> simulate_cpu_pipeline(std::span<const Schedule* const> stages,
                                                         std::span<const Model* const> models,
                                                         const Cluster& cluster) {
  if (stages.empty()) return {};
  if (models.size() != stages.size()) {
    throw std::logic_error("simulate_cpu_pipeline: one model per stage");
  }
  return CpuPipeline(stages, models, cluster).run();
}

}  // namespace zerolens
