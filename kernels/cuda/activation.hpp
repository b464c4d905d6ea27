#pragma once
// Elementwise GELU (tanh approximation) and residual add on the GPU, same contract as
// kernels/activation.hpp: forwards overwrite, backwards ACCUMULATE (+=).
#include <cuda_runtime_api.h>

#include <cstddef>

namespace zerolens::kernels::cuda {

void gelu_forward(float* out, const float* inp, std::size_t count, cudaStream_t stream);
void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t count,
                   cudaStream_t stream);
// grad (= dout on entry) becomes dout * GELU'(inp).
void gelu_backward_inplace(float* grad, const float* inp, std::size_t count, cudaStream_t stream);

// out = inp1 + inp2 (out may alias either input); backward: dinp1 += dout, dinp2 += dout.
void residual_forward(float* out, const float* inp1, const float* inp2, std::size_t count,
                      cudaStream_t stream);
void residual_backward(float* dinp1, float* dinp2, const float* dout, std::size_t count,
                       cudaStream_t stream);

}  // namespace zerolens::kernels::cuda
