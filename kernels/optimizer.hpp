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

// The float scalars of one Adam step, shared by the CPU loop and the CUDA kernel so both round
// alike. 1 - beta and the bias corrections are formed in double first, as PyTorch does (1 - 0.999f
// in float is 1.3e-5 off); the corrections are folded into two factors, as PyTorch's and
// DeepSpeed's CPU Adam do (step_size = lr / (1 - beta1^t), denominator sqrt(v) / sqrt(1 - beta2^t)
// + eps): one square root and one division per element. Throws std::invalid_argument when step < 1.
struct AdamScalars {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps, decay, lr_decay, step_size,
      inverse_sqrt_correction2;
};
AdamScalars adam_scalars(const AdamConfig& config, std::int64_t step);

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
