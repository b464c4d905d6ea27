#pragma once
// Device helpers shared by the .cu files of this folder (not a public header).
#include <cmath>
#include <cstddef>

namespace zerolens::kernels::cuda::device {

constexpr unsigned full_mask = 0xFFFFFFFFu;

__device__ inline float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(full_mask, value, offset);
  return value;
}

__device__ inline float warp_max(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(full_mask, value, offset));
  return value;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
// `scratch` holds 32 floats of shared memory; the call synchronises the block.
__device__ inline float block_sum(float value, float* scratch) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  value = warp_sum(value);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  value = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(value);
}

__device__ inline float block_max(float value, float* scratch) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  value = warp_max(value);
  __syncthreads();
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  value = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(value);
}

// First index and stride of a grid-stride loop over elements.
__device__ inline std::size_t global_index() {
  return std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::size_t global_stride() {
  return std::size_t(gridDim.x) * blockDim.x;
}

}  // namespace zerolens::kernels::cuda::device
