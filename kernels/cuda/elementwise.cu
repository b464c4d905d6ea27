// Conversions and arithmetic on fp32/bf16/fp16 arrays: grid-stride, bound by memory bandwidth.
// __f*_rn intrinsics fix each rounding so the results match the host loops bit for bit.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/runtime.hpp"

namespace zerolens::kernels::cuda {

namespace {

constexpr unsigned block_size = 256;

template <ElementFormat format>
using Format = std::integral_constant<ElementFormat, format>;

template <ElementFormat format>
constexpr HalfFormat half_of = format == ElementFormat::bf16 ? HalfFormat::bf16 : HalfFormat::fp16;

// Element i as fp32 (16-bit values widen exactly).
template <ElementFormat format>
__device__ inline float load(const void* values, std::size_t i) {
  if constexpr (format == ElementFormat::fp32)
    return static_cast<const float*>(values)[i];
  else
    return device::half_bits_to_float<half_of<format>>(
        static_cast<const std::uint16_t*>(values)[i]);
}

template <ElementFormat format>
__device__ inline void store(void* values, std::size_t i, float value) {
  if constexpr (format == ElementFormat::fp32)
    static_cast<float*>(values)[i] = value;
  else
    static_cast<std::uint16_t*>(values)[i] = device::float_to_half_bits<half_of<format>>(value);
}

// Bit test, as the host does, so it holds whatever the compiler assumes about inf and NaN.
template <ElementFormat format>
__device__ inline bool exponent_all_ones(const void* values, std::size_t i) {
  if constexpr (format == ElementFormat::fp32) {
    constexpr std::uint32_t exponent = 0x7F800000u;
    return (static_cast<const std::uint32_t*>(values)[i] & exponent) == exponent;
  } else {
    constexpr unsigned exponent = format == ElementFormat::fp16 ? 0x7C00u : 0x7F80u;
    return (static_cast<const std::uint16_t*>(values)[i] & exponent) == exponent;
  }
}

template <ElementFormat out_format, ElementFormat in_format>
__global__ void convert_kernel(void* out, const void* in, std::size_t count) {
  for (std::size_t i = device::global_index(); i < count; i += device::global_stride())
    store<out_format>(out, i, load<in_format>(in, i));
}

// The host computes to + factor * from with two roundings; __f*_rn keeps nvcc from fusing them.
template <ElementFormat to_format, ElementFormat from_format>
__global__ void add_scaled_kernel(void* to, const void* from, std::size_t count, float factor) {
  for (std::size_t i = device::global_index(); i < count; i += device::global_stride()) {
    const float product = __fmul_rn(factor, load<from_format>(from, i));
    store<to_format>(to, i, __fadd_rn(load<to_format>(to, i), product));
  }
}

template <ElementFormat format>
__global__ void scale_kernel(void* values, std::size_t count, float factor) {
  for (std::size_t i = device::global_index(); i < count; i += device::global_stride())
    store<format>(values, i, __fmul_rn(load<format>(values, i), factor));
}

template <ElementFormat format>
__global__ void flag_inf_or_nan_kernel(const void* values, std::size_t count, int* found) {
  bool any = false;
  for (std::size_t i = device::global_index(); i < count; i += device::global_stride())
    any = any || exponent_all_ones<format>(values, i);
  // One store per warp at most: the flag is a single word many threads could hit.
  if (__any_sync(device::full_mask, any) && threadIdx.x % 32 == 0) *found = 1;
}

__device__ inline double warp_sum(double value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(device::full_mask, value, offset);
  return value;
}

// The block's sum (blockDim.x == block_size), valid in thread 0.
__device__ inline double block_sum(double value) {
  __shared__ double warp_sums[block_size / 32];
  value = warp_sum(value);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = value;
  __syncthreads();
  value = threadIdx.x < block_size / 32 ? warp_sums[threadIdx.x] : 0.0;
  return warp_sum(value);
}

// A float squared is exact in double (48 significant bits), so only the additions round.
template <ElementFormat format>
__global__ void __launch_bounds__(block_size)
    square_partials_kernel(const void* values, std::size_t count, double* partials) {
  double sum = 0.0;
  for (std::size_t i = device::global_index(); i < count; i += device::global_stride()) {
    const double value = load<format>(values, i);
    sum += value * value;
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void __launch_bounds__(block_size)
    sum_partials_kernel(const double* partials, unsigned count, double* result) {
  double sum = 0.0;
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = block_sum(sum);
  if (threadIdx.x == 0) *result = sum;
}

// Calls f(Format<format>{}), so a format known at run time picks a kernel's template instance.
template <typename F>
void with_format(ElementFormat format, F&& f) {
  switch (format) {
    case ElementFormat::fp32:
      return f(Format<ElementFormat::fp32>{});
    case ElementFormat::bf16:
      return f(Format<ElementFormat::bf16>{});
    case ElementFormat::fp16:
      return f(Format<ElementFormat::fp16>{});
  }
  throw std::invalid_argument("unknown ElementFormat");
}

}  // namespace

std::size_t element_size(ElementFormat format) {
  return format == ElementFormat::fp32 ? 4 : 2;
}

void convert(void* out, ElementFormat out_format, const void* in, ElementFormat in_format,
             std::size_t count, cudaStream_t stream) {
  if (count == 0) return;
  if (out_format == in_format) {
    if (out == in) return;
    check(cudaMemcpyAsync(out, in, count * element_size(out_format), cudaMemcpyDeviceToDevice,
                          stream),
          "cudaMemcpyAsync (convert)");
    return;
  }
  const unsigned grid = grid_for(count, block_size);
  with_format(out_format, [&](auto out_tag) {
    with_format(in_format, [&](auto in_tag) {
      convert_kernel<decltype(out_tag)::value, decltype(in_tag)::value>
          <<<grid, block_size, 0, stream>>>(out, in, count);
    });
  });
  check_launch("convert_kernel");
}

void add_scaled(void* to, ElementFormat to_format, const void* from, ElementFormat from_format,
                std::size_t count, float factor, cudaStream_t stream) {
  if (count == 0) return;
  const unsigned grid = grid_for(count, block_size);
  with_format(to_format, [&](auto to_tag) {
    with_format(from_format, [&](auto from_tag) {
      add_scaled_kernel<decltype(to_tag)::value, decltype(from_tag)::value>
          <<<grid, block_size, 0, stream>>>(to, from, count, factor);
    });
  });
  check_launch("add_scaled_kernel");
}

void scale(void* values, ElementFormat format, std::size_t count, float factor,
           cudaStream_t stream) {
  if (count == 0) return;
  const unsigned grid = grid_for(count, block_size);
  with_format(format, [&](auto tag) {
    scale_kernel<decltype(tag)::value><<<grid, block_size, 0, stream>>>(values, count, factor);
  });
  check_launch("scale_kernel");
}

void flag_inf_or_nan(const void* values, ElementFormat format, std::size_t count, int* found,
                     cudaStream_t stream) {
  if (count == 0) return;
  const unsigned grid = grid_for(count, block_size);
  with_format(format, [&](auto tag) {
    flag_inf_or_nan_kernel<decltype(tag)::value>
        <<<grid, block_size, 0, stream>>>(values, count, found);
  });
  check_launch("flag_inf_or_nan_kernel");
}

void sum_of_squares(const void* values, ElementFormat format, std::size_t count, double* partials,
                    double* result, cudaStream_t stream) {
  if (count == 0) {
    check(cudaMemsetAsync(result, 0, sizeof(double), stream), "cudaMemsetAsync (sum_of_squares)");
    return;
  }
  const unsigned blocks = std::min<unsigned>(grid_for(count, block_size), sum_of_squares_partials);
  with_format(format, [&](auto tag) {
    square_partials_kernel<decltype(tag)::value>
        <<<blocks, block_size, 0, stream>>>(values, count, partials);
  });
  check_launch("square_partials_kernel");
  sum_partials_kernel<<<1, block_size, 0, stream>>>(partials, blocks, result);
  check_launch("sum_partials_kernel");
}

}  // namespace zerolens::kernels::cuda
