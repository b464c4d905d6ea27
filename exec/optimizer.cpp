#include "exec/optimizer.hpp"

#include "kernels/optimizer.hpp"

namespace zerolens::exec {

std::size_t Optimizer::state_per_element() const {
  if (config_.type == OptimizerType::Sgd) return config_.momentum > 0 ? 1 : 0;
  return 2;
}

// The arithmetic lives in kernels/ (vectorised, multi-threaded, checked against float64).
void Optimizer::update(std::span<float> params, std::span<const float> grads, std::span<float> first,
                       std::span<float> second) const {
  if (config_.type == OptimizerType::Sgd) {
    const kernels::SgdConfig sgd{config_.lr, config_.momentum, config_.weight_decay};
    kernels::sgd_step(params.data(), grads.data(), first.empty() ? nullptr : first.data(), params.size(), sgd);
    return;
  }
  const kernels::AdamConfig adam{config_.lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay,
                                 config_.type == OptimizerType::AdamW};
  kernels::adam_step(params.data(), grads.data(), first.data(), second.data(), params.size(), adam, step_);
}

}  // namespace zerolens::exec
