#pragma once
// The engine's components wired together, their resident buffers allocated in the plan's order:
// the one way to build them, for the engine and for the tests that run them alone.
#include "exec/engine/checkpoint_io.hpp"
#include "exec/engine/context.hpp"
#include "exec/engine/gradient_reducer.hpp"
#include "exec/engine/nvme_swapper.hpp"
#include "exec/engine/optimizer_runner.hpp"
#include "exec/engine/parameter_store.hpp"
#include "exec/model/layer_model.hpp"

namespace zerolens::exec {

struct EngineComponents {
  // `net` gives the initial parameters; the plan, communicator and ledger must outlive these.
  EngineComponents(const Plan& plan, Communicator& comm, LayerModel& net, MemoryLedger& ledger);
  EngineComponents(const Plan& plan, std::shared_ptr<const ProcessGroups> groups, LayerModel& net,
                   MemoryLedger& ledger);

  // Declared in the order they are built (each uses those above it).
  EngineContext context;
  NvmeSwapper nvme;
  ParameterStore params;
  GradientReducer grads;
  OptimizerRunner optimizer;
  CheckpointIo checkpoint;
};

}  // namespace zerolens::exec
