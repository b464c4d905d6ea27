#include "exec/zero_engine.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "exec/zero_state.hpp"
#include "sim/core/error.hpp"

namespace zerolens::exec {
namespace {

using Clock = std::chrono::steady_clock;

void require_offload_supported(const TrainingConfig& config) {
  const ZeroConfig& zero = config.zero;
  const OffloadDevice optimizer = zero.offload_optimizer.device, params = zero.offload_param.device;
  if (!config.precision.mixed() && params != OffloadDevice::None &&
      (optimizer == OffloadDevice::Nvme || params == OffloadDevice::Nvme)) {
    throw InputError("zero_optimization.offload_param.device",
                     "fp32 training with the parameters offloaded and NVMe in use is not run: the host optimizer "
                     "updates the fp32 parameters themselves, which the executor keeps in memory only (use bf16 or "
                     "fp16, or keep the parameters on the device)");
  }
  if (params != OffloadDevice::None && optimizer == OffloadDevice::None) {
    throw InputError("zero_optimization.offload_param.device",
                     "parameter offload needs offload_optimizer.device = cpu or nvme in the CPU executor (the plan "
                     "has no copy of the updated parameters back to the host)");
  }
}

void require_supported(const Plan& plan, const Communicator& comm) {
  const TrainingConfig& config = plan.request.config;
  if (plan.request.dp_size != comm.size()) {
    throw InputError("--gpus", "the plan is for " + std::to_string(plan.request.dp_size) + " ranks but " +
                                   std::to_string(comm.size()) + " processes are running (start with mpirun -np " +
                                   std::to_string(plan.request.dp_size) + ")");
  }
  const LossScaleConfig& scaling = config.precision.loss_scale;
  if (config.precision.precision == Precision::Fp16 && scaling.static_loss_scale < 0) {
    throw InputError("fp16.loss_scale", "must be 0 (dynamic) or a positive static scale");
  }
  if (config.precision.precision == Precision::Fp16 && scaling.dynamic() && !(scaling.min_loss_scale > 0)) {
    throw InputError("fp16.min_loss_scale", "must be positive");
  }
  require_offload_supported(config);
  if (config.activation_checkpointing.cpu_checkpointing) {
    throw InputError("activation_checkpointing.cpu_checkpointing", "not run by the CPU executor yet");
  }
}

}  // namespace

ZeroEngine::ZeroEngine(const Plan& plan, Communicator& comm, LayerModel& model, MemoryLedger& ledger,
                       const EngineOptions& options) {
  require_supported(plan, comm);
  state_ = std::make_unique<State>(plan, comm, model, ledger, options);
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

LinkBytes ZeroEngine::link_bytes() const { return state_->copied; }

double ZeroEngine::loss_scale() const { return state_->scaler.scale(); }

}  // namespace zerolens::exec
