#pragma once
// LayerNorm on the GPU, same contract as kernels/layernorm.hpp (eps kernels::layernorm_eps):
// forward overwrites out, mean, rstd; backward ACCUMULATES (+=) dinp, dweight, dbias.
#include <cuda_runtime_api.h>

#include <cstddef>

namespace zerolens::kernels::cuda {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, std::size_t rows, std::size_t channels,
                       cudaStream_t stream);

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        std::size_t rows, std::size_t channels, cudaStream_t stream);

}  // namespace zerolens::kernels::cuda
