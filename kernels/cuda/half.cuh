#pragma once
// Device conversions between fp32 and 16-bit bit patterns, bit-identical to kernels/precision.hpp:
// round to nearest even through cuda_bf16.h / cuda_fp16.h; NaN handled explicitly because the
// hardware conversion may return a canonical NaN where the CPU keeps the sign and payload.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/precision.hpp"

namespace zerolens::kernels::cuda::device {

__device__ inline bool is_nan_bits(std::uint32_t bits) {
  return (bits & 0x7FFFFFFFu) > 0x7F800000u;
}

__device__ inline std::uint16_t float_to_bf16_bits(float value) {
  const std::uint32_t bits = __float_as_uint(value);
  if (is_nan_bits(bits)) return std::uint16_t((bits >> 16) | 0x0040u);  // quiet, sign kept
  return __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

__device__ inline std::uint16_t float_to_fp16_bits(float value) {
  const std::uint32_t bits = __float_as_uint(value);
  if (is_nan_bits(bits))
    return std::uint16_t(((bits >> 16) & 0x8000u) | 0x7E00u | ((bits >> 13) & 0x03FFu));
  return __half_as_ushort(__float2half_rn(value));
}

__device__ inline float bf16_bits_to_float(std::uint16_t bits) {
  return __uint_as_float(std::uint32_t(bits) << 16);  // exact
}

__device__ inline float fp16_bits_to_float(std::uint16_t bits) {
  if ((bits & 0x7C00u) == 0x7C00u && (bits & 0x03FFu) != 0)  // NaN: payload and sign kept
    return __uint_as_float((std::uint32_t(bits & 0x8000u) << 16) | 0x7F800000u |
                           (std::uint32_t(bits & 0x03FFu) << 13));
  return __half2float(__ushort_as_half(bits));
}

template <HalfFormat format>
__device__ inline std::uint16_t float_to_half_bits(float value) {
  if constexpr (format == HalfFormat::bf16)
    return float_to_bf16_bits(value);
  else
    return float_to_fp16_bits(value);
}

template <HalfFormat format>
__device__ inline float half_bits_to_float(std::uint16_t bits) {
  if constexpr (format == HalfFormat::bf16)
    return bf16_bits_to_float(bits);
  else
    return fp16_bits_to_float(bits);
}

}  // namespace zerolens::kernels::cuda::device
