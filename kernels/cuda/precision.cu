// Casts and gradient unscale: elementwise, grid-stride, bound by memory bandwidth.
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/precision.hpp"
#include "kernels/cuda/runtime.hpp"

namespace zerolens::kernels::cuda {

namespace {

constexpr unsigned block_size = 256;

template <HalfFormat format>
__global__ void to_half_kernel(std::uint16_t* out, const float* in, std::size_t count) {
  for (std::size_t i = device::global_index(); i < count; i += device::global_stride())
    out[i] = device::float_to_half_bits<format>(in[i]);
}

template <HalfFormat format>
__global__ void from_half_kernel(float* out, const std::uint16_t* in, std::size_t count) {
  for (std::size_t i = device::global_index(); i < count; i += device::global_stride())
    out[i] = device::half_bits_to_float<format>(in[i]);
}

// `Load` reads element i as float. Finite input times a finite factor may still overflow, so the
// result is what is tested (a non-finite input gives a non-finite result unless the factor is 0,
// which is tested too).
template <typename Load>
__device__ void unscale(float* out, Load load, std::size_t count, float inverse_scale,
                        int* found_non_finite) {
  bool non_finite = false;
  for (std::size_t i = device::global_index(); i < count; i += device::global_stride()) {
    const float value = load(i);
    const float result = value * inverse_scale;
    non_finite |= !isfinite(value) || !isfinite(result);
    out[i] = result;
  }
  // One store per warp at most: the flag is a single word many threads could hit.
  if (__any_sync(device::full_mask, non_finite) && threadIdx.x % 32 == 0) *found_non_finite = 1;
}

__global__ void unscale_fp32_kernel(float* grads, std::size_t count, float inverse_scale,
                                    int* found_non_finite) {
  unscale(
      grads, [grads](std::size_t i) { return grads[i]; }, count, inverse_scale, found_non_finite);
}

template <HalfFormat format>
__global__ void unscale_half_kernel(float* out, const std::uint16_t* grads, std::size_t count,
                                    float inverse_scale, int* found_non_finite) {
  unscale(
      out, [grads](std::size_t i) { return device::half_bits_to_float<format>(grads[i]); }, count,
      inverse_scale, found_non_finite);
}

}  // namespace

void cast_to_half(std::uint16_t* out, const float* in, std::size_t count, HalfFormat format,
                  cudaStream_t stream) {
  if (count == 0) return;
  const unsigned grid = grid_for(count, block_size);
  if (format == HalfFormat::bf16)
    to_half_kernel<HalfFormat::bf16><<<grid, block_size, 0, stream>>>(out, in, count);
  else
    to_half_kernel<HalfFormat::fp16><<<grid, block_size, 0, stream>>>(out, in, count);
  check_launch("to_half_kernel");
}

void cast_from_half(float* out, const std::uint16_t* in, std::size_t count, HalfFormat format,
                    cudaStream_t stream) {
  if (count == 0) return;
  const unsigned grid = grid_for(count, block_size);
  if (format == HalfFormat::bf16)
    from_half_kernel<HalfFormat::bf16><<<grid, block_size, 0, stream>>>(out, in, count);
  else
    from_half_kernel<HalfFormat::fp16><<<grid, block_size, 0, stream>>>(out, in, count);
  check_launch("from_half_kernel");
}

void unscale_grads(float* grads, std::size_t count, float inverse_scale, int* found_non_finite,
                   cudaStream_t stream) {
  if (count == 0) return;
  unscale_fp32_kernel<<<grid_for(count, block_size), block_size, 0, stream>>>(
      grads, count, inverse_scale, found_non_finite);
  check_launch("unscale_fp32_kernel");
}

void unscale_grads(float* out, const std::uint16_t* grads, HalfFormat format, std::size_t count,
                   float inverse_scale, int* found_non_finite, cudaStream_t stream) {
  if (count == 0) return;
  const unsigned grid = grid_for(count, block_size);
  if (format == HalfFormat::bf16)
    unscale_half_kernel<HalfFormat::bf16>
        <<<grid, block_size, 0, stream>>>(out, grads, count, inverse_scale, found_non_finite);
  else
    unscale_half_kernel<HalfFormat::fp16>
        <<<grid, block_size, 0, stream>>>(out, grads, count, inverse_scale, found_non_finite);
  check_launch("unscale_half_kernel");
}

}  // namespace zerolens::kernels::cuda
