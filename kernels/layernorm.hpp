#pragma once
// LayerNorm over the channel dimension of row-major [rows, channels] float32 activations (eps
// 1e-5).
#include <cstddef>

namespace zerolens::kernels {

inline constexpr float layernorm_eps = 1e-5f;

// out = (inp - mean) * rstd * weight + bias per row; saves mean[rows] and rstd[rows] for backward
// (rstd = 1 / sqrt(biased variance + eps)). `out` is overwritten.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, std::size_t rows, std::size_t channels);

// ACCUMULATES (+=) dinp[rows, channels], dweight[channels] and dbias[channels] from dout, using the
// mean and rstd saved by layernorm_forward.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        std::size_t rows, std::size_t channels);

}  // namespace zerolens::kernels
