#include "exec/optimizer.hpp"

#include <cmath>

namespace zerolens::exec {

std::size_t Optimizer::state_per_element() const {
  if (config_.type == OptimizerType::Sgd) return config_.momentum > 0 ? 1 : 0;
  return 2;
}

void Optimizer::update(std::span<float> params, std::span<const float> grads, std::span<float> first,
                       std::span<float> second) const {
  const std::size_t n = params.size();
  const auto lr = float(config_.lr), decay = float(config_.weight_decay);
  if (config_.type == OptimizerType::Sgd) {
    const auto momentum = float(config_.momentum);
    for (std::size_t i = 0; i < n; ++i) {
      float g = grads[i] + decay * params[i];
      if (momentum > 0) g = first[i] = momentum * first[i] + g;
      params[i] -= lr * g;
    }
    return;
  }
  const double t = double(step_);
  const auto beta1 = float(config_.beta1), beta2 = float(config_.beta2), eps = float(config_.eps);
  const auto correction1 = float(1 - std::pow(config_.beta1, t)), correction2 = float(1 - std::pow(config_.beta2, t));
  const bool decoupled = config_.type == OptimizerType::AdamW;
  float* m = first.data();
  float* v = second.data();
  for (std::size_t i = 0; i < n; ++i) {
    const float g = decoupled ? grads[i] : grads[i] + decay * params[i];
    m[i] = beta1 * m[i] + (1 - beta1) * g;
    v[i] = beta2 * v[i] + (1 - beta2) * g * g;
    const float update = (m[i] / correction1) / (std::sqrt(v[i] / correction2) + eps);
    params[i] -= lr * (decoupled ? update + decay * params[i] : update);
  }
}

}  // namespace zerolens::exec
