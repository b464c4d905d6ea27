#pragma once
// The optimizer the engine applies to each owned segment of parameters, with the arithmetic in
// kernels/optimizer.hpp: Adam/AdamW (DeepSpeed and PyTorch semantics) or SGD with optional
// momentum. Adam keeps (m, v) per element, SGD with momentum its momentum buffer.
#include <cstdint>
#include <span>

#include "kernels/optimizer.hpp"
#include "sim/config/config.hpp"

namespace zerolens::exec {

class Numbers;

class Optimizer {
 public:
  explicit Optimizer(const OptimizerConfig& config) : config_(config) {}
  // State floats per parameter element: 2 (Adam), 1 (SGD with momentum), 0 (SGD).
  std::size_t state_per_element() const;
  void begin_step() { ++step_; }
  std::int64_t step() const { return step_; }
  void restore_step(std::int64_t step) { step_ = step; }  // resuming from a checkpoint
  // Adam: `first` = m, `second` = v; SGD with momentum: `first` = momentum; unused ones may be empty.
  void update(std::span<float> params, std::span<const float> grads, std::span<float> first,
              std::span<float> second) const;
  // The same on fp32 numbers in host memory or in one memory space (exec/memory/memory_space.hpp).
  void update(Numbers params, Numbers grads, Numbers first, Numbers second) const;
  const OptimizerConfig& config() const { return config_; }
  // The kernels' settings (host and CUDA kernels take the same ones, so both run the same step).
  kernels::AdamConfig adam_config() const;
  kernels::SgdConfig sgd_config() const;

 private:
  OptimizerConfig config_;
  std::int64_t step_ = 0;
};

}  // namespace zerolens::exec
