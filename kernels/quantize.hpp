#pragma once
// Symmetric block quantization of fp32 values to int8 or int4 codes (ZeRO++'s qwZ weight gathers
// and qgZ gradient exchanges). The values are cut into blocks of `block` consecutive elements
// (the last block holds the rest when `block` does not divide the count); each block has one fp32
// scale s = max|x| / q_max, q_max = 2^(bits-1) - 1 (127 for int8, 7 for int4), and each element
// the code q = round(x / s) (to nearest, ties to even) in [-q_max, q_max]. Dequantization is q x s.
// So every finite element comes back within s / 2 of itself, the block's largest included.
//
// DeepSpeed's kernels (csrc/includes/quantization_utils.h, Params<Symmetric>) step by
// 2 max|x| / 2^bits and clamp codes to [-2^(bits-1), 2^(bits-1) - 1], so their largest positive
// element can lose a whole step; the bytes (codes and one fp32 scale per block) are the same.
//
// Edge cases: an all-zero block has scale 0 and codes 0 (it comes back as zeros; so does a block
// whose max|x| / q_max underflows to 0, below 2^-149 x q_max); a block holding
// a NaN or an infinity has scale NaN and codes 0, so all of its elements come back NaN (a
// non-finite gradient stays visible to fp16's overflow check after a quantized reduction).
//
// int4 codes are two's-complement nibbles, two per byte: element i is in byte i / 2, the low
// nibble for even i, the high nibble for odd i (an odd count leaves the last high nibble 0).
#include <cstddef>
#include <cstdint>

namespace zerolens::kernels {

inline constexpr int quantized_max(int bits) {
  return (1 << (bits - 1)) - 1;
}

// Bytes of `count` codes: one each for int8, half a byte each (rounded up) for int4.
std::size_t quantized_code_bytes(std::size_t count, int bits);
// Blocks of `block` elements covering `count` (the last one partial).
std::size_t quantization_blocks(std::size_t count, std::size_t block);

// `codes`: quantized_code_bytes(count, bits) bytes; `scales`: quantization_blocks(count, block)
// floats. `bits` is 8 or 4 (std::invalid_argument otherwise, and for block 0).
void quantize_blocks(std::uint8_t* codes, float* scales, const float* in, std::size_t count,
                     std::size_t block, int bits);
void dequantize_blocks(float* out, const std::uint8_t* codes, const float* scales,
                       std::size_t count, std::size_t block, int bits);
// out[i] += dequantized element i (a sum of several ranks' quantized contributions).
void dequantize_add_blocks(float* out, const std::uint8_t* codes, const float* scales,
                           std::size_t count, std::size_t block, int bits);

// One element's code (sign-extended), for tests and readers of a packed buffer.
int quantized_code(const std::uint8_t* codes, std::size_t i, int bits);

}  // namespace zerolens::kernels
