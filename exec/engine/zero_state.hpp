#pragma once
// The ZeRO engine's per-rank state (internal to exec/): its components, wired together, and the
// dispatch of each op kind of the schedule to the component that runs it.
#include <cstdint>

#include "exec/engine/checkpoint_io.hpp"
#include "exec/engine/context.hpp"
#include "exec/engine/gradient_reducer.hpp"
#include "exec/engine/nvme_swapper.hpp"
#include "exec/engine/optimizer_runner.hpp"
#include "exec/engine/parameter_store.hpp"
#include "exec/engine/zero_engine.hpp"

namespace zerolens::exec {

struct ZeroEngine::State {
  State(const Plan& plan, Communicator& comm, LayerModel& net, MemoryLedger& ledger,
        const EngineOptions& options);

  void begin_step(std::int64_t step_index);
  void run(const Op& op);
  StepReport finish_step();

  // Declared in the order they are built (each uses those above it).
  EngineContext context;
  LayerModel& net;
  EngineOptions options;
  NvmeSwapper nvme;
  ParameterStore params;
  GradientReducer grads;
  OptimizerRunner optimizer;
  CheckpointIo checkpoint;

 private:
  void run_op(const Op& op);
  void gather_parameters(const Op& op);
  void copy_to_device(const Op& op);
  void nvme_read(const Op& op);
  void nvme_write(const Op& op);
  void optimizer_step(const Op& op);
  void forward(const Op& op);
  void backward(const Op& op);
  void inject_faults(const Op& op);
  void ensure_batch(std::int32_t micro_step);

  std::int64_t step_index_ = 0;
  std::int32_t loaded_micro_ = -1;
  double loss_sum_ = 0;
  int losses_ = 0;
};

}  // namespace zerolens::exec
