#include "kernels/precision.hpp"

#include <bit>

namespace zerolens::kernels {

namespace {

constexpr std::uint32_t fp32_sign_mask = 0x80000000u;
constexpr std::uint32_t fp32_exponent_mask = 0x7F800000u;
constexpr std::uint32_t fp32_abs_mask = 0x7FFFFFFFu;
constexpr std::uint32_t fp32_mantissa_bits = 23;

constexpr std::uint16_t fp16_infinity = 0x7C00u;
constexpr std::uint16_t fp16_quiet_bit = 0x0200u;
constexpr std::uint32_t fp16_mantissa_bits = 10;
// Exponent bias difference: fp32 bias 127 - fp16 bias 15.
constexpr std::uint32_t exponent_rebias = 112;
// |x| >= 65520.0f (0x477FF000) rounds past 65504 to infinity; below 2^-14 (0x38800000) is
// subnormal.
constexpr std::uint32_t fp16_overflow_threshold = 0x477FF000u;
constexpr std::uint32_t fp16_min_normal = 0x38800000u;

bool is_nan_bits(std::uint32_t bits) {
  return (bits & fp32_abs_mask) > fp32_exponent_mask;
}

// value >> shift rounded to nearest, ties to even (shift in [1, 31]).
std::uint32_t shift_right_round_even(std::uint32_t value, std::uint32_t shift) {
  const std::uint32_t kept = value >> shift;
  const std::uint32_t remainder = value & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  return kept + ((remainder > half || (remainder == half && (kept & 1u))) ? 1u : 0u);
}

}  // namespace

std::uint16_t fp32_to_bf16(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  // Rounding a NaN could carry into the exponent and make it infinity; quiet it instead.
  if (is_nan_bits(bits)) return std::uint16_t((bits >> 16) | 0x0040u);
  // Adding 0x7FFF (+1 when the kept lsb is odd) rounds to nearest even; a carry may reach infinity.
  const std::uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return std::uint16_t((bits + rounding) >> 16);
}

float bf16_to_fp32(std::uint16_t bits) {
  return std::bit_cast<float>(std::uint32_t(bits) << 16);
}

std::uint16_t fp32_to_fp16(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = std::uint16_t((bits & fp32_sign_mask) >> 16);
  const std::uint32_t magnitude = bits & fp32_abs_mask;
  if (is_nan_bits(bits))
    return std::uint16_t(sign | fp16_infinity | fp16_quiet_bit | ((magnitude >> 13) & 0x03FFu));
  if (magnitude >= fp16_overflow_threshold) return std::uint16_t(sign | fp16_infinity);
  if (magnitude >= fp16_min_normal) {
    // Rebias the exponent and round away the 13 extra mantissa bits; a carry out of the mantissa
    // correctly bumps the exponent (the overflow case was handled above).
    const std::uint32_t rebased = magnitude - (exponent_rebias << fp32_mantissa_bits);
    return std::uint16_t(sign |
                         shift_right_round_even(rebased, fp32_mantissa_bits - fp16_mantissa_bits));
  }
  // Subnormal half: value = q * 2^-24. With the implicit bit, |x| = mantissa * 2^(exponent - 150),
  // so q = mantissa >> (126 - exponent), rounded to even. Rounding up to 0x400 yields the smallest
  // normal, which is the right encoding. fp32 subnormals (exponent 0) are far below 2^-25.
  const std::uint32_t exponent = magnitude >> fp32_mantissa_bits;
  if (exponent == 0) return sign;
  const std::uint32_t shift = 126u - exponent;  // >= 14 here
  if (shift > 24u) return sign;                 // |x| < 2^-25 rounds to zero
  const std::uint32_t mantissa = (magnitude & 0x007FFFFFu) | 0x00800000u;
  return std::uint16_t(sign | shift_right_round_even(mantissa, shift));
}

float fp16_to_fp32(std::uint16_t bits) {
  const std::uint32_t sign = std::uint32_t(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> fp16_mantissa_bits) & 0x1Fu;
  std::uint32_t mantissa = bits & 0x03FFu;
  if (exponent == 0x1Fu)  // infinity or NaN, payload kept
    return std::bit_cast<float>(sign | fp32_exponent_mask | (mantissa << 13));
  if (exponent != 0)
    return std::bit_cast<float>(sign | ((exponent + exponent_rebias) << fp32_mantissa_bits) |
                                (mantissa << 13));
  if (mantissa == 0) return std::bit_cast<float>(sign);
  // Subnormal half: normalize, moving the leading one into the implicit bit.
  std::uint32_t fp32_exponent = exponent_rebias + 1;
  while ((mantissa & 0x0400u) == 0) {
    mantissa <<= 1;
    --fp32_exponent;
  }
  mantissa &= 0x03FFu;
  return std::bit_cast<float>(sign | (fp32_exponent << fp32_mantissa_bits) | (mantissa << 13));
}

void cast_fp32_to_bf16(std::uint16_t* out, const float* in, std::size_t count) {
#pragma omp parallel for schedule(static) if (count > 65536)
  for (std::size_t i = 0; i < count; ++i) out[i] = fp32_to_bf16(in[i]);
}

void cast_bf16_to_fp32(float* out, const std::uint16_t* in, std::size_t count) {
#pragma omp parallel for schedule(static) if (count > 65536)
  for (std::size_t i = 0; i < count; ++i) out[i] = bf16_to_fp32(in[i]);
}

void cast_fp32_to_fp16(std::uint16_t* out, const float* in, std::size_t count) {
#pragma omp parallel for schedule(static) if (count > 65536)
  for (std::size_t i = 0; i < count; ++i) out[i] = fp32_to_fp16(in[i]);
}

void cast_fp16_to_fp32(float* out, const std::uint16_t* in, std::size_t count) {
#pragma omp parallel for schedule(static) if (count > 65536)
  for (std::size_t i = 0; i < count; ++i) out[i] = fp16_to_fp32(in[i]);
}

bool has_inf_or_nan(const float* data, std::size_t count) {
  unsigned found = 0;
#pragma omp parallel for schedule(static) reduction(| : found) if (count > 65536)
  for (std::size_t i = 0; i < count; ++i)
    found |= (std::bit_cast<std::uint32_t>(data[i]) & fp32_exponent_mask) == fp32_exponent_mask
                 ? 1u
                 : 0u;
  return found != 0;
}

void scale(float* data, std::size_t count, float factor) {
#pragma omp parallel for schedule(static) if (count > 65536)
  for (std::size_t i = 0; i < count; ++i) data[i] *= factor;
}

}  // namespace zerolens::kernels
