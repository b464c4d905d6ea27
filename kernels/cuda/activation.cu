// GELU and residual: elementwise, grid-stride, bound by memory bandwidth.
#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/runtime.hpp"

namespace zerolens::kernels::cuda {

namespace {

constexpr unsigned block_size = 256;
constexpr float gelu_scale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float gelu_cube = 0.044715f;

__device__ inline float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(gelu_scale * (x + gelu_cube * x * x * x)));
}

__device__ inline float gelu_derivative(float x) {
  const float inner = gelu_scale * (x + gelu_cube * x * x * x);
  const float t = tanhf(inner);
  const float sech2 = 1.0f - t * t;
  return 0.5f * (1.0f + t) + 0.5f * x * sech2 * gelu_scale * (1.0f + 3.0f * gelu_cube * x * x);
}

__global__ void gelu_forward_kernel(float* out, const float* inp, std::size_t count) {
  for (std::size_t i = device::global_index(); i < count; i += device::global_stride())
    out[i] = gelu(inp[i]);
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout,
                                     std::size_t count) {
  for (std::size_t i = device::global_index(); i < count; i += device::global_stride())
    dinp[i] += dout[i] * gelu_derivative(inp[i]);
}

__global__ void gelu_backward_inplace_kernel(float* grad, const float* inp, std::size_t count) {
  for (std::size_t i = device::global_index(); i < count; i += device::global_stride())
    grad[i] *= gelu_derivative(inp[i]);
}

__global__ void residual_forward_kernel(float* out, const float* inp1, const float* inp2,
                                        std::size_t count) {
  for (std::size_t i = device::global_index(); i < count; i += device::global_stride())
    out[i] = inp1[i] + inp2[i];
}

__global__ void residual_backward_kernel(float* dinp1, float* dinp2, const float* dout,
                                         std::size_t count) {
  for (std::size_t i = device::global_index(); i < count; i += device::global_stride()) {
    const float d = dout[i];
    dinp1[i] += d;
    dinp2[i] += d;
  }
}

}  // namespace

void gelu_forward(float* out, const float* inp, std::size_t count, cudaStream_t stream) {
  if (count == 0) return;
  gelu_forward_kernel<<<grid_for(count, block_size), block_size, 0, stream>>>(out, inp, count);
  check_launch("gelu_forward_kernel");
}

void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t count,
                   cudaStream_t stream) {
  if (count == 0) return;
  gelu_backward_kernel<<<grid_for(count, block_size), block_size, 0, stream>>>(dinp, inp, dout,
                                                                               count);
  check_launch("gelu_backward_kernel");
}

void gelu_backward_inplace(float* grad, const float* inp, std::size_t count, cudaStream_t stream) {
  if (count == 0) return;
  gelu_backward_inplace_kernel<<<grid_for(count, block_size), block_size, 0, stream>>>(grad, inp,
                                                                                       count);
  check_launch("gelu_backward_inplace_kernel");
}

void residual_forward(float* out, const float* inp1, const float* inp2, std::size_t count,
                      cudaStream_t stream) {
  if (count == 0) return;
  residual_forward_kernel<<<grid_for(count, block_size), block_size, 0, stream>>>(out, inp1, inp2,
                                                                                  count);
  check_launch("residual_forward_kernel");
}

void residual_backward(float* dinp1, float* dinp2, const float* dout, std::size_t count,
                       cudaStream_t stream) {
  if (count == 0) return;
  residual_backward_kernel<<<grid_for(count, block_size), block_size, 0, stream>>>(dinp1, dinp2,
                                                                                   dout, count);
  check_launch("residual_backward_kernel");
}

}  // namespace zerolens::kernels::cuda
