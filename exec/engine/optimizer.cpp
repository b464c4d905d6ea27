#include "exec/engine/optimizer.hpp"

#include <stdexcept>

#include "exec/memory/memory_space.hpp"
#include "exec/memory/numbers.hpp"
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
    kernels::sgd_step(params.data(), grads.data(), first.empty() ? nullptr : first.data(), params.size(), sgd_config());
    return;
  }
  kernels::adam_step(params.data(), grads.data(), first.data(), second.data(), params.size(), adam_config(), step_);
}

kernels::AdamConfig Optimizer::adam_config() const {
  return {config_.lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay,
          config_.type == OptimizerType::AdamW};
}

kernels::SgdConfig Optimizer::sgd_config() const { return {config_.lr, config_.momentum, config_.weight_decay}; }

void Optimizer::update(Numbers params, Numbers grads, Numbers first, Numbers second) const {
  for (const Numbers& numbers : {params, grads, first, second}) {
    if (numbers.format() != NumberFormat::Fp32) throw std::invalid_argument("Optimizer::update: fp32 numbers only");
    if (numbers.size() > 0 && numbers.space() != params.space()) {
      throw std::invalid_argument("Optimizer::update: numbers in different memory spaces");
    }
  }
  if (params.on_host()) return update(params.wide(), grads.wide(), first.wide(), second.wide());
  params.space()->optimizer_update(*this, params, grads, first, second);
}

}  // namespace zerolens::exec
