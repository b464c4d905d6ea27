#include "exec/zero_engine.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "exec/zero_state.hpp"
#include "sim/error.hpp"

namespace zerolens::exec {
namespace {

using Clock = std::chrono::steady_clock;

void require_supported(const Plan& plan, const Communicator& comm) {
  const TrainingConfig& config = plan.request.config;
  if (plan.request.dp_size != comm.size()) {
    throw InputError("--gpus", "the plan is for " + std::to_string(plan.request.dp_size) + " ranks but " +
                                   std::to_string(comm.size()) + " processes are running (start with mpirun -np " +
                                   std::to_string(plan.request.dp_size) + ")");
  }
  if (config.precision.precision != Precision::Fp32) {
    throw InputError("precision", "the CPU executor runs fp32 only so far (fp16/bf16 with loss scaling is next)");
  }
  if (config.zero.offload_optimizer.device != OffloadDevice::None || config.zero.offload_param.device != OffloadDevice::None) {
    throw InputError("zero_optimization.offload_optimizer", "the CPU executor does not run offload yet");
  }
  if (config.activation_checkpointing.cpu_checkpointing) {
    throw InputError("activation_checkpointing.cpu_checkpointing", "not run by the CPU executor yet");
  }
}

}  // namespace

ZeroEngine::ZeroEngine(const Plan& plan, Communicator& comm, LayerModel& model, MemoryLedger& ledger) {
  require_supported(plan, comm);
  state_ = std::make_unique<State>(plan, comm, model, ledger);
}

ZeroEngine::~ZeroEngine() = default;

StepReport ZeroEngine::step(std::int64_t step_index, const OpCallback& on_op) {
  State& s = *state_;
  s.begin_step(step_index);
  const auto start = Clock::now();
  const auto seconds = [&start] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  for (std::size_t i = 0; i < s.schedule.ops.size(); ++i) {
    const double begin = seconds();
    s.run(s.schedule.ops[i]);
    if (on_op) on_op(i, begin, seconds());
  }
  return s.finish_step();
}

std::vector<float> ZeroEngine::full_parameters() { return state_->full_parameters(); }

}  // namespace zerolens::exec
