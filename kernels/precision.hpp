#pragma once
// Reduced-precision storage: fp32 <-> bf16 and fp32 <-> fp16 (IEEE binary16) as uint16_t bit
// patterns, rounding to nearest, ties to even; and the loss-scaling helpers of fp16 training.
#include <cstddef>
#include <cstdint>

namespace zerolens::kernels {

// bf16 keeps fp32's exponent: finite values round to nearest even on the dropped 16 bits (values
// beyond the largest bf16 round to infinity); NaN stays NaN (quieted, sign kept).
std::uint16_t fp32_to_bf16(float value);
float bf16_to_fp32(std::uint16_t bits);  // exact

// fp16: |value| >= 65520 (the midpoint above 65504, the largest finite half) becomes infinity;
// values below 2^-14 become subnormals (rounded at 2^-24 steps), below or at 2^-25 they become zero
// (sign kept); NaN stays NaN (quieted, sign and top payload bits kept).
std::uint16_t fp32_to_fp16(float value);
float fp16_to_fp32(std::uint16_t bits);  // exact

// Whole arrays of `count` elements with the scalar rules above.
void cast_fp32_to_bf16(std::uint16_t* out, const float* in, std::size_t count);
void cast_bf16_to_fp32(float* out, const std::uint16_t* in, std::size_t count);
void cast_fp32_to_fp16(std::uint16_t* out, const float* in, std::size_t count);
void cast_fp16_to_fp32(float* out, const std::uint16_t* in, std::size_t count);

// True when any element is +-inf or NaN (an fp16 loss-scale overflow). Tests the exponent bits, so
// it also works under -ffast-math.
bool has_inf_or_nan(const float* data, std::size_t count);

// data[i] *= factor (loss scaling and unscaling, gradient clipping).
void scale(float* data, std::size_t count, float factor);

}  // namespace zerolens::kernels
