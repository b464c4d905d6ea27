#pragma once
// Optimizer steps over flat fp32 master weights (one contiguous range of parameters and states).
// Each element is updated independently, so any thread count gives bit-identical results.
#include <cstddef>
#include <cstdint>

namespace zerolens::kernels {

// Adam as DeepSpeed's CPU Adam and PyTorch define it: bias-corrected moments, eps added after the
// square root. adam_w_mode = true: AdamW, weight decay decoupled (param -= lr * decay * param);
// false: classic Adam, L2 decay added to the gradient before the moments.
struct AdamConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool adam_w_mode = true;
};

// One step over `count` elements; `step` counts from 1 (bias correction 1 - beta^step).
// exp_avg (m) and exp_avg_sq (v) start at zero and are updated in place. `threads` <= 0 uses the
// OpenMP default. Throws std::invalid_argument when step < 1.
void adam_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
               std::size_t count, const AdamConfig& config, std::int64_t step, int threads = 0);

// SGD with optional momentum and L2 weight decay, as PyTorch's SGD with dampening 0, no Nesterov:
// g = grad + decay * param; buf = momentum * buf + g (buf starts at zero); param -= lr * buf.
struct SgdConfig {
  double lr = 1e-3;
  double momentum = 0.0;
  double weight_decay = 0.0;
};

// `momentum_buffer` is used only when config.momentum > 0 and may then not be nullptr.
// `threads` <= 0 uses the OpenMP default.
void sgd_step(float* params, const float* grads, float* momentum_buffer, std::size_t count,
              const SgdConfig& config, int threads = 0);

}  // namespace zerolens::kernels
