#include "kernels/quantize.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace zerolens::kernels {
namespace {

void check_arguments(std::size_t block, int bits) {
  if (bits != 8 && bits != 4)
    throw std::invalid_argument("quantization to " + std::to_string(bits) + " bits (8 or 4)");
  if (block == 0) throw std::invalid_argument("quantization blocks of 0 elements");
}

// Exponent bits all ones: +-inf or NaN (a bit test, so -ffast-math cannot fold it away).
bool non_finite(float value) {
  return (std::bit_cast<std::uint32_t>(value) & 0x7F800000u) == 0x7F800000u;
}

// The block's scale: max|x| / q_max, 0 for an all-zero block, NaN when a value is not finite.
float block_scale(const float* in, std::size_t count, int bits) {
  float largest = 0.0f;
  for (std::size_t i = 0; i < count; ++i) {
    if (non_finite(in[i])) return std::numeric_limits<float>::quiet_NaN();
    largest = std::max(largest, std::fabs(in[i]));
  }
  return largest / float(quantized_max(bits));
}

int code_of(float value, float scale, int bits) {
  if (!(scale > 0.0f)) return 0;  // zero block, or NaN scale
  const int limit = quantized_max(bits);
  const float rounded = std::nearbyint(value / scale);  // default rounding: to nearest, ties even
  return int(std::clamp(rounded, -float(limit), float(limit)));
}

void store_code(std::uint8_t* codes, std::size_t i, int code, int bits) {
  if (bits == 8) {
    codes[i] = std::uint8_t(std::int8_t(code));
    return;
  }
  const auto nibble = std::uint8_t(code & 0x0F);
  std::uint8_t& byte = codes[i / 2];
  byte = (i % 2 == 0) ? std::uint8_t((byte & 0xF0) | nibble)
                      : std::uint8_t((byte & 0x0F) | (nibble << 4));
}

template <bool Add>
void dequantize(float* out, const std::uint8_t* codes, const float* scales, std::size_t count,
                std::size_t block, int bits) {
  check_arguments(block, bits);
  for (std::size_t i = 0; i < count; ++i) {
    const float value = float(quantized_code(codes, i, bits)) * scales[i / block];
    if constexpr (Add)
      out[i] += value;
    else
      out[i] = value;
  }
}

}  // namespace

std::size_t quantized_code_bytes(std::size_t count, int bits) {
  return bits == 4 ? (count + 1) / 2 : count;
}

std::size_t quantization_blocks(std::size_t count, std::size_t block) {
  return block == 0 ? 0 : (count + block - 1) / block;
}

int quantized_code(const std::uint8_t* codes, std::size_t i, int bits) {
  if (bits == 8) return int(std::int8_t(codes[i]));
  const int nibble = (i % 2 == 0) ? (codes[i / 2] & 0x0F) : (codes[i / 2] >> 4);
  return nibble >= 8 ? nibble - 16 : nibble;
}

void quantize_blocks(std::uint8_t* codes, float* scales, const float* in, std::size_t count,
                     std::size_t block, int bits) {
  check_arguments(block, bits);
  if (bits == 4 && count % 2 == 1) codes[count / 2] = 0;  // the unused high nibble
  const std::size_t blocks = quantization_blocks(count, block);
  // Blocks of an odd length share int4 bytes: those go in one thread.
  const bool whole_bytes = bits == 8 || block % 2 == 0;
#pragma omp parallel for schedule(static) if (count > 65536 && whole_bytes)
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t first = b * block, length = std::min(block, count - first);
    const float scale = block_scale(in + first, length, bits);
    scales[b] = scale;
    for (std::size_t i = first; i < first + length; ++i)
      store_code(codes, i, code_of(in[i], scale, bits), bits);
  }
}

void dequantize_blocks(float* out, const std::uint8_t* codes, const float* scales,
                       std::size_t count, std::size_t block, int bits) {
  dequantize<false>(out, codes, scales, count, block, bits);
}

void dequantize_add_blocks(float* out, const std::uint8_t* codes, const float* scales,
                           std::size_t count, std::size_t block, int bits) {
  dequantize<true>(out, codes, scales, count, block, bits);
}

}  // namespace zerolens::kernels
