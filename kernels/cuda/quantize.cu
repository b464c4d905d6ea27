// Block quantization: one thread block per quantization block finds its scale, then a grid-stride
// pass writes the codes a byte at a time (an int4 byte may hold elements of two blocks), and
// dequantization is elementwise. IEEE-rounded division and products (__fdiv_rn, __fmul_rn,
// __fadd_rn: never contracted or approximated) keep every bit equal to the CPU kernel's.
#include <stdexcept>
#include <string>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/quantize.hpp"
#include "kernels/cuda/runtime.hpp"

namespace zerolens::kernels::cuda {

namespace {

constexpr unsigned block_size = 256;
constexpr unsigned max_scale_grid = 65535;

void check_arguments(std::size_t block, int bits) {
  if (bits != 8 && bits != 4)
    throw std::invalid_argument("quantization to " + std::to_string(bits) + " bits (8 or 4)");
  if (block == 0) throw std::invalid_argument("quantization blocks of 0 elements");
}

__device__ inline int code_limit(int bits) {
  return (1 << (bits - 1)) - 1;
}

__device__ inline bool non_finite(float value) {
  return (__float_as_uint(value) & 0x7F800000u) == 0x7F800000u;
}

// max|x| / q_max of each block, NaN for a block holding a non-finite value.
__global__ void scales_kernel(float* scales, const float* in, std::size_t count, std::size_t block,
                              std::size_t blocks, int bits) {
  __shared__ float scratch[32];
  for (std::size_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const std::size_t first = b * block;
    const std::size_t last = first + block < count ? first + block : count;
    float largest = 0.0f, bad = 0.0f;
    for (std::size_t i = first + threadIdx.x; i < last; i += blockDim.x) {
      if (non_finite(in[i]))
        bad = 1.0f;
      else
        largest = fmaxf(largest, fabsf(in[i]));
    }
    largest = device::block_max(largest, scratch);
    bad = device::block_max(bad, scratch);
    if (threadIdx.x == 0)
      scales[b] =
          bad > 0.0f ? __int_as_float(0x7FC00000) : __fdiv_rn(largest, float(code_limit(bits)));
  }
}

__device__ inline unsigned code_bits(float value, float scale, int bits) {
  if (!(scale > 0.0f)) return 0;
  const float limit = float(code_limit(bits));
  const float rounded = fminf(fmaxf(rintf(__fdiv_rn(value, scale)), -limit), limit);
  return unsigned(int(rounded)) & (bits == 8 ? 0xFFu : 0x0Fu);
}

__global__ void codes_kernel(std::uint8_t* codes, const float* scales, const float* in,
                             std::size_t count, std::size_t block, int bits) {
  const std::size_t bytes = bits == 4 ? (count + 1) / 2 : count;
  for (std::size_t j = device::global_index(); j < bytes; j += device::global_stride()) {
    if (bits == 8) {
      codes[j] = std::uint8_t(code_bits(in[j], scales[j / block], bits));
      continue;
    }
    const std::size_t even = 2 * j, odd = even + 1;
    unsigned byte = code_bits(in[even], scales[even / block], bits);
    if (odd < count) byte |= code_bits(in[odd], scales[odd / block], bits) << 4;
    codes[j] = std::uint8_t(byte);
  }
}

__device__ inline int code_at(const std::uint8_t* codes, std::size_t i, int bits) {
  if (bits == 8) return int(static_cast<signed char>(codes[i]));
  const int nibble = (i % 2 == 0) ? (codes[i / 2] & 0x0F) : (codes[i / 2] >> 4);
  return nibble >= 8 ? nibble - 16 : nibble;
}

template <bool Add>
__global__ void dequantize_kernel(float* out, const std::uint8_t* codes, const float* scales,
                                  std::size_t count, std::size_t block, int bits) {
  for (std::size_t i = device::global_index(); i < count; i += device::global_stride()) {
    const float value = __fmul_rn(float(code_at(codes, i, bits)), scales[i / block]);
    out[i] = Add ? __fadd_rn(out[i], value) : value;
  }
}

template <bool Add>
void launch_dequantize(float* out, const std::uint8_t* codes, const float* scales,
                       std::size_t count, std::size_t block, int bits, cudaStream_t stream) {
  check_arguments(block, bits);
  if (count == 0) return;
  dequantize_kernel<Add><<<grid_for(count, block_size), block_size, 0, stream>>>(
      out, codes, scales, count, block, bits);
  check_launch("dequantize_kernel");
}

}  // namespace

void quantize_blocks(std::uint8_t* codes, float* scales, const float* in, std::size_t count,
                     std::size_t block, int bits, cudaStream_t stream) {
  check_arguments(block, bits);
  if (count == 0) return;
  const std::size_t blocks = (count + block - 1) / block;
  const auto scale_grid = unsigned(blocks < max_scale_grid ? blocks : max_scale_grid);
  scales_kernel<<<scale_grid, block_size, 0, stream>>>(scales, in, count, block, blocks, bits);
  check_launch("scales_kernel");
  const std::size_t bytes = bits == 4 ? (count + 1) / 2 : count;
  codes_kernel<<<grid_for(bytes, block_size), block_size, 0, stream>>>(codes, scales, in, count,
                                                                       block, bits);
  check_launch("codes_kernel");
}

void dequantize_blocks(float* out, const std::uint8_t* codes, const float* scales,
                       std::size_t count, std::size_t block, int bits, cudaStream_t stream) {
  launch_dequantize<false>(out, codes, scales, count, block, bits, stream);
}

void dequantize_add_blocks(float* out, const std::uint8_t* codes, const float* scales,
                           std::size_t count, std::size_t block, int bits, cudaStream_t stream) {
  launch_dequantize<true>(out, codes, scales, count, block, bits, stream);
}

}  // namespace zerolens::kernels::cuda
