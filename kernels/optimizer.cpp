#include "kernels/optimizer.hpp"
#include "kernels/stream.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace zerolens::kernels {

namespace {

// The mode is a template parameter so each loop body is branch-free and vectorizes.
template <bool decoupled_decay>
inline void adam_span(float* params, const float* grads, float* m, float* v, std::size_t count,
                      const AdamScalars& s) {
#pragma omp simd
  for (std::size_t i = 0; i < count; ++i) {
    const float g = decoupled_decay ? grads[i] : grads[i] + s.decay * params[i];
    m[i] = s.beta1 * m[i] + s.one_minus_beta1 * g;
    v[i] = s.beta2 * v[i] + s.one_minus_beta2 * g * g;
    const float update =
        s.step_size * m[i] / (std::sqrt(v[i]) * s.inverse_sqrt_correction2 + s.eps);
    params[i] -= decoupled_decay ? update + s.lr_decay * params[i] : update;
  }
}

// On x86-64 each span is also compiled for AVX2 (8 floats per instruction instead of SSE's 4) and
// the CPU picks at load time: with SSE alone the square root and division cap a core below the
// memory bandwidth. Without FMA contraction both versions round every element identically.
#if defined(__x86_64__) && defined(__GNUC__)
#define ZEROLENS_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ZEROLENS_VECTOR_CLONES
#endif

ZEROLENS_VECTOR_CLONES void adamw_span(float* params, const float* grads, float* m, float* v,
                                       std::size_t count, const AdamScalars& s) {
  adam_span<true>(params, grads, m, v, count, s);
}

ZEROLENS_VECTOR_CLONES void adam_l2_span(float* params, const float* grads, float* m, float* v,
                                         std::size_t count, const AdamScalars& s) {
  adam_span<false>(params, grads, m, v, count, s);
}

// Each thread updates one contiguous range (whole 64-byte lines, so no line is shared).
void adam_loop(bool decoupled_decay, float* params, const float* grads, float* m, float* v,
               std::size_t count, const AdamScalars& s, int threads) {
  auto span = decoupled_decay ? adamw_span : adam_l2_span;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) if (count > 4096)
  {
    constexpr std::size_t kLine = 16;  // floats per cache line
    const auto team = std::size_t(omp_get_num_threads()), rank = std::size_t(omp_get_thread_num());
    const std::size_t per_thread = (count + team * kLine - 1) / (team * kLine) * kLine;
    const std::size_t begin = std::min(count, rank * per_thread);
    const std::size_t end = std::min(count, begin + per_thread);
    span(params + begin, grads + begin, m + begin, v + begin, end - begin, s);
  }
#else
  (void)threads;
  span(params, grads, m, v, count, s);
#endif
}

template <bool with_momentum>
void sgd_loop(float* params, const float* grads, float* buffer, std::size_t count, float lr,
              float momentum, float decay, int threads) {
  (void)threads;  // unused when built without OpenMP
#pragma omp parallel for simd schedule(static) num_threads(threads) if (count > 4096)
  for (std::size_t i = 0; i < count; ++i) {
    float g = grads[i] + decay * params[i];
    if constexpr (with_momentum) g = buffer[i] = momentum * buffer[i] + g;
    params[i] -= lr * g;
  }
}

}  // namespace

AdamScalars adam_scalars(const AdamConfig& config, std::int64_t step) {
  if (step < 1) throw std::invalid_argument("adam_step: step counts from 1");
  const auto t = double(step);
  return {float(config.beta1),
          float(config.beta2),
          float(1.0 - config.beta1),
          float(1.0 - config.beta2),
          float(config.eps),
          float(config.weight_decay),
          float(config.lr * config.weight_decay),
          float(config.lr / (1.0 - std::pow(config.beta1, t))),
          float(1.0 / std::sqrt(1.0 - std::pow(config.beta2, t)))};
}

void adam_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
               std::size_t count, const AdamConfig& config, std::int64_t step, int threads) {
  const AdamScalars scalars = adam_scalars(config, step);
  adam_loop(config.adam_w_mode, params, grads, exp_avg, exp_avg_sq, count, scalars,
            host_thread_count(threads));
}

void sgd_step(float* params, const float* grads, float* momentum_buffer, std::size_t count,
              const SgdConfig& config, int threads) {
  const auto lr = float(config.lr), momentum = float(config.momentum),
             decay = float(config.weight_decay);
  if (momentum > 0.0f) {
    if (momentum_buffer == nullptr)
      throw std::invalid_argument("sgd_step: momentum needs a momentum buffer");
    sgd_loop<true>(params, grads, momentum_buffer, count, lr, momentum, decay,
                   host_thread_count(threads));
  } else {
    sgd_loop<false>(params, grads, nullptr, count, lr, momentum, decay, host_thread_count(threads));
  }
}

}  // namespace zerolens::kernels
