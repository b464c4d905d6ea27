#pragma once
// The ZeRO engine's per-rank state (internal to exec/): its components (components.hpp) and the
// dispatch of each op kind of the schedule to the component that runs it.
#include <cstdint>
#include <set>

#include "exec/engine/components.hpp"
#include "exec/engine/pipeline_transfers.hpp"
#include "exec/engine/tensor_parallel_ops.hpp"
#include "exec/engine/zero_engine.hpp"

namespace zerolens::exec {

struct ZeroEngine::State : EngineComponents {
  State(const Plan& plan, std::shared_ptr<const ProcessGroups> groups, LayerModel& net,
        MemoryLedger& ledger, const EngineOptions& options);

  void begin_step(std::int64_t step_index);
  void run(const Op& op, std::size_t index);
  StepReport finish_step();

  LayerModel& net;
  EngineOptions options;
  TensorParallelOps tensor_parallel;  // the TP collectives the model's layers issue
  PipelineTransfers pipeline;         // sends and receives between pipeline stages

 private:
  void run_op(const Op& op);
  void require_data_group(const Op& op) const;
  Bytes changes_secondary(const Op& op) const;
  void gather_parameters(const Op& op);
  void copy_to_device(const Op& op);
  void nvme_read(const Op& op);
  void nvme_write(const Op& op);
  void optimizer_step(const Op& op);
  void delayed_update();
  bool warmup_step() const;
  bool applies_delayed_update() const;
  void forward(const Op& op);
  void backward(const Op& op);
  void inject_faults(const Op& op);
  void ensure_batch(std::int32_t micro_step);

  std::int64_t step_index_ = 0;
  std::set<std::int32_t> loaded_;  // micro-steps whose batch the model has (this step)
  double loss_sum_ = 0;
  int losses_ = 0;
  bool delayed_ = false;            // the schedule delays the parameter update (DPU)
  bool pending_gradients_ = false;  // DPU: the previous step's gradients wait on the host
};

}  // namespace zerolens::exec
