#pragma once
// The engine's optimizer runner (internal to exec/): the update in any precision. The fp16 overflow
// check, the global gradient norm, unscaling and clipping, the optimizer on the device, on the host
// (ZeRO-Offload) or sub-group by sub-group through NVMe, and the loss scale. It owns the
// optimizer's fp32 master and states where they are in memory.
#include <span>

#include "exec/engine/gradient_reducer.hpp"
#include "exec/engine/loss_scaler.hpp"
#include "exec/engine/nvme_swapper.hpp"
#include "exec/engine/optimizer.hpp"
#include "exec/engine/parameter_store.hpp"

namespace zerolens::exec {

// The fp32 numbers of a host buffer (the host optimizer's), which host code reads directly.
std::span<float> host_floats(const NumberBuffer& buffer);

class OptimizerRunner {
 public:
  OptimizerRunner(EngineContext& context, GradientReducer& grads, ParameterStore& params,
                  NvmeSwapper& nvme);

  // The resident buffers, in the plan's order: the master (has_master, unless in NVMe files) before
  // the parameters, the states after them.
  void allocate_master();
  void allocate_states();
  Numbers master() const { return master_.view(); }

  void begin_step();
  bool skipped() const { return overflow_; }  // fp16: this step's gradients overflowed on some rank
  double grad_norm() const { return overflow_ ? 0 : norm_; }
  double step_scale() const { return step_scale_; }  // the loss scale of this step's backward

  // OverflowCheck (fp16): over the DP group (stages 1-3), then over the TP group (TP).
  void check_overflow(const Op& op);
  // GradNorm: the sum of squares over the DP group (stages 1-3), then over the TP group (TP).
  void compute_grad_norm(const Op& op);
  void step();                          // OptimizerStep with the states in memory
  void group_step(std::int32_t group);  // OptimizerStep of one NVMe sub-group
  void write_back_params();             // CopyH2D of the updated parameters after a host update
  // The delayed update's first step has no gradients to apply: nothing is updated or written back.
  void mark_idle() { idle_ = true; }
  void update_loss_scale() { scaler_.update(overflow_); }

  // The optimizer on the owned elements `range` holds (the whole partition, or one NVMe
  // sub-group), with the host gradients unscaled and clipped by `factor` on the way.
  void update_range(const OptimizerRange& range, float factor);
  OptimizerRange in_memory();  // the host optimizer's master and states

  Optimizer& optimizer() { return optimizer_; }
  const Optimizer& optimizer() const { return optimizer_; }
  LossScaler& scaler() { return scaler_; }
  const LossScaler& scaler() const { return scaler_; }
  Numbers first_state() const { return first_state_.view(); }
  Numbers second_state() const { return second_state_.view(); }

 private:
  bool local_overflow();
  double local_squares();      // of the owned gradients this rank counts in the norm
  void average_expert_norm();  // GradNorm over the expert-data-parallel group
  float update_factor() const;
  void device_update(float factor);
  void device_update_range(Elements begin, Elements end,
                           float factor);                     // owned elements [begin, end)
  NumberBuffer fp32_gradients(Elements begin, Elements end);  // empty: step on the gradients
  void host_update(float factor);

  EngineContext& ctx_;
  GradientReducer& grads_;
  ParameterStore& params_;
  NvmeSwapper& nvme_;
  Optimizer optimizer_;
  LossScaler scaler_;
  NumberBuffer master_;  // the fp32 master partition (has_master), unless in NVMe files
  NumberBuffer first_state_, second_state_;  // fp32, on the optimizer's device
  double norm_ = 0;
  double squares_ = 0;  // summed over the groups reduced so far
  double step_scale_ = 1;
  bool overflow_ = false;
  bool overflow_reduced_ = false, norm_reduced_ = false;  // by a collective op this step
  bool idle_ = false;
};

}  // namespace zerolens::exec
