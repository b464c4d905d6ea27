// Symmetric block quantization (kernels/quantize.hpp) against a float64 reference and by hand.
#include "kernels/quantize.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernel_test_support.hpp"

namespace zerolens::kernels {
namespace {

using testing::random_floats;

struct Quantized {
  std::vector<std::uint8_t> codes;
  std::vector<float> scales;
  std::vector<float> values;  // dequantized
};

Quantized round_trip(const std::vector<float>& in, std::size_t block, int bits) {
  Quantized q{std::vector<std::uint8_t>(quantized_code_bytes(in.size(), bits), 0xAB),
              std::vector<float>(quantization_blocks(in.size(), block)),
              std::vector<float>(in.size())};
  quantize_blocks(q.codes.data(), q.scales.data(), in.data(), in.size(), block, bits);
  dequantize_blocks(q.values.data(), q.codes.data(), q.scales.data(), in.size(), block, bits);
  return q;
}

// The bound, worked: with m = max|x| of a block and s = m / q_max, the code q = round(x / s)
// has |x / s - q| <= 1/2, so |x - q s| <= s / 2. In float, x / s is rounded once (relative
// 2^-24 of |x / s| <= q_max, so at most q_max 2^-24 in code units, q_max s 2^-24 = m 2^-24 in
// value) and q s once more (at most |q s| 2^-24 <= m 2^-24 (1 + 2^-24)): the dequantized value
// is within s / 2 + 2.0001 m 2^-24 of x. The error is taken in float64 from the float inputs.
void expect_within_half_a_step(const std::vector<float>& in, std::size_t block, int bits) {
  const Quantized q = round_trip(in, block, bits);
  const double limit = double(quantized_max(bits));
  double worst = 0;  // error over the bound's s / 2, in steps
  for (std::size_t b = 0; b < q.scales.size(); ++b) {
    const std::size_t first = b * block, last = std::min(in.size(), first + block);
    double largest = 0;
    for (std::size_t i = first; i < last; ++i)
      largest = std::max(largest, std::fabs(double(in[i])));
    const double reference_scale = largest / limit;  // float64
    ASSERT_NEAR(q.scales[b], reference_scale, reference_scale * 0x1p-24) << "block " << b;
    const double bound = double(q.scales[b]) / 2 + 2.0001 * largest * 0x1p-24;
    for (std::size_t i = first; i < last; ++i) {
      const int code = quantized_code(q.codes.data(), i, bits);
      ASSERT_LE(std::abs(code), quantized_max(bits)) << "element " << i;
      ASSERT_EQ(q.values[i], float(code) * q.scales[b]) << "element " << i;
      const double error = std::fabs(double(q.values[i]) - double(in[i]));
      ASSERT_LE(error, bound) << "element " << i << " of block " << b << " (" << bits << " bits)";
      if (q.scales[b] > 0) worst = std::max(worst, error / double(q.scales[b]));
    }
  }
  // Random values in blocks of many come within 1 % of the bound: the data do not quantize
  // exactly by luck, so the bound above is really exercised.
  if (block >= 64 && in.size() >= 4096) {
    EXPECT_GT(worst, 0.49);
  }
}

TEST(Quantize, RoundTripIsWithinHalfAStepOfEveryElement) {
  std::mt19937 rng(20);
  for (const int bits : {8, 4}) {
    for (const std::size_t block :
         {std::size_t(1), std::size_t(7), std::size_t(64), std::size_t(8000)}) {
      expect_within_half_a_step(random_floats(20000, rng), block, bits);
      expect_within_half_a_step(random_floats(4099, rng, -3e-3f, 1e-3f), block, bits);
      expect_within_half_a_step(random_floats(4101, rng, -5e4f, 7e4f), block, bits);
    }
  }
}

// By hand. int8, one block of 3: m = 1.27, s = 0.01; 1.27 / s = 127, -0.5 / s = -50,
// 0.013 / s = 1.3 -> 1: bytes 0x7F, 0xCE (-50 in two's complement), 0x01.
TEST(Quantize, Int8CodesWorkedByHand) {
  const std::vector<float> in = {1.27f, -0.5f, 0.013f};
  const Quantized q = round_trip(in, 3, 8);
  EXPECT_EQ(q.codes, (std::vector<std::uint8_t>{0x7F, 0xCE, 0x01}));
  EXPECT_FLOAT_EQ(q.scales[0], 0.01f);
  EXPECT_FLOAT_EQ(q.values[2], 0.01f);
}

// int4, blocks of 4 over 5 elements. Block 0: m = 0.7, s = 0.1; codes 7, -3, 1, -7 are the
// nibbles 0x7, 0xD, 0x1, 0x9; element 0 in the low nibble of byte 0, element 1 in its high one:
// bytes 0xD7 and 0x91. Block 1 is the single element 0 (a partial, all-zero block): scale 0, code
// 0, in the low nibble of byte 2 whose unused high nibble is 0.
TEST(Quantize, Int4PacksTwoCodesPerByteWorkedByHand) {
  const std::vector<float> in = {0.7f, -0.3f, 0.1f, -0.7f, 0.0f};
  const Quantized q = round_trip(in, 4, 4);
  EXPECT_EQ(q.codes, (std::vector<std::uint8_t>{0xD7, 0x91, 0x00}));
  ASSERT_EQ(q.scales.size(), 2u);
  EXPECT_FLOAT_EQ(q.scales[0], 0.1f);
  EXPECT_EQ(q.scales[1], 0.0f);
  EXPECT_EQ(quantized_code(q.codes.data(), 1, 4), -3);
  EXPECT_EQ(quantized_code(q.codes.data(), 3, 4), -7);
  EXPECT_EQ(q.values[4], 0.0f);
}

// Count 10 in blocks of 4: three blocks, the last of elements 8 and 9 only, scaled by them alone.
TEST(Quantize, TheLastBlockOfALengthBlocksDoNotDivideIsScaledByItsOwnElements) {
  const std::vector<float> in = {5, -5, 5, -5, 1, 1, 1, 1, 0.25f, -0.5f};
  const Quantized q = round_trip(in, 4, 4);
  ASSERT_EQ(q.scales.size(), 3u);
  EXPECT_FLOAT_EQ(q.scales[2], 0.5f / 7);
  EXPECT_EQ(quantized_code(q.codes.data(), 9, 4), -7);
  EXPECT_FLOAT_EQ(q.values[9], -0.5f);
  EXPECT_FLOAT_EQ(q.scales[1], 1.0f / 7);
}

TEST(Quantize, AnAllZeroBlockComesBackAsZeros) {
  std::vector<float> in(16, 0.0f);
  in[12] = -2.0f;
  const Quantized q = round_trip(in, 8, 8);
  EXPECT_EQ(q.scales[0], 0.0f);
  for (std::size_t i = 0; i < 8; ++i) EXPECT_EQ(q.values[i], 0.0f) << i;
  EXPECT_EQ(q.values[12], -2.0f);
}

// A non-finite element poisons its block (NaN scale: every element NaN), never its neighbours.
TEST(Quantize, ANonFiniteElementMakesItsBlockNaNAndNoOther) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const int bits : {8, 4}) {
    const std::vector<float> in = {1, inf, 2, 3, -1, -2, nan, 0, 0.5f, -0.25f, 0.125f, 1};
    const Quantized q = round_trip(in, 4, bits);
    for (std::size_t i = 0; i < 8; ++i) EXPECT_TRUE(std::isnan(q.values[i])) << i << " " << bits;
    EXPECT_FLOAT_EQ(q.scales[2], 1.0f / float(quantized_max(bits)));
    EXPECT_FLOAT_EQ(q.values[11], 1.0f);
  }
}

TEST(Quantize, DequantizeAddSumsOntoTheOutput) {
  std::mt19937 rng(3);
  const std::vector<float> in = random_floats(999, rng);
  const Quantized q = round_trip(in, 100, 4);
  std::vector<float> sum = random_floats(in.size(), rng);
  const std::vector<float> before = sum;
  dequantize_add_blocks(sum.data(), q.codes.data(), q.scales.data(), in.size(), 100, 4);
  for (std::size_t i = 0; i < in.size(); ++i) EXPECT_EQ(sum[i], before[i] + q.values[i]) << i;
}

TEST(Quantize, RefusesOtherWidthsAndEmptyBlocks) {
  std::vector<float> in(4, 1.0f), scales(4), out(4);
  std::vector<std::uint8_t> codes(4);
  EXPECT_THROW(quantize_blocks(codes.data(), scales.data(), in.data(), 4, 2, 5),
               std::invalid_argument);
  EXPECT_THROW(quantize_blocks(codes.data(), scales.data(), in.data(), 4, 0, 8),
               std::invalid_argument);
  EXPECT_THROW(dequantize_blocks(out.data(), codes.data(), scales.data(), 4, 2, 16),
               std::invalid_argument);
  EXPECT_EQ(quantized_code_bytes(5, 4), 3u);
  EXPECT_EQ(quantized_code_bytes(5, 8), 5u);
  EXPECT_EQ(quantization_blocks(10, 4), 3u);
}

}  // namespace
}  // namespace zerolens::kernels
