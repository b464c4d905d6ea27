#include "kernels/precision.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace zerolens::kernels {
namespace {

float from_bits(std::uint32_t bits) {
  return std::bit_cast<float>(bits);
}
bool is_fp16_nan(std::uint16_t bits) {
  return (bits & 0x7C00u) == 0x7C00u && (bits & 0x03FFu) != 0;
}
bool is_bf16_nan(std::uint16_t bits) {
  return (bits & 0x7F80u) == 0x7F80u && (bits & 0x007Fu) != 0;
}

// Value of a half bit pattern from the IEEE binary16 definition, in double.
double fp16_value(std::uint16_t bits) {
  const double sign = (bits & 0x8000u) ? -1.0 : 1.0;
  const int exponent = (bits >> 10) & 0x1F;
  const int mantissa = bits & 0x3FF;
  if (exponent == 0x1F)
    return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(double(mantissa), -24);
  return sign * std::ldexp(1.0 + double(mantissa) / 1024.0, exponent - 15);
}

struct Fp16Case {
  float value;
  std::uint16_t bits;
};

TEST(Fp16, KnownBitPatterns) {
  const Fp16Case cases[] = {
      {1.0f, 0x3C00},
      {-2.0f, 0xC000},
      {0.5f, 0x3800},
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {0.0999755859375f, 0x2E66},  // the half nearest 0.1 (1.599609375 * 2^-4)
      {65504.0f, 0x7BFF},
      {std::ldexp(1.0f, -14), 0x0400},
      {std::ldexp(1.0f, -24), 0x0001},
      {3.140625f, 0x4248},
      {-1024.0f, 0xE400},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(fp32_to_fp16(c.value), c.bits) << c.value;
    EXPECT_EQ(fp16_to_fp32(c.bits), c.value) << std::hex << c.bits;
  }
  EXPECT_EQ(fp32_to_fp16(0.1f), 0x2E66);  // 0.1 lies nearer 0x2E66 than 0x2E67
}

TEST(Fp16, TiesRoundToEven) {
  // 1 + 2^-11 lies midway between 0x3C00 (even) and 0x3C01: down. 1 + 3 * 2^-11 lies midway between
  // 0x3C01 (odd) and 0x3C02: up. Just above a midway point rounds up.
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(1.0f + 3.0f * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
  EXPECT_EQ(fp32_to_fp16(-(1.0f + std::ldexp(1.0f, -11))), 0xBC00);
  // Mantissa carry into the exponent: 2 - 2^-11 is midway between 0x3BFF (odd) and 2.0 (0x4000).
  EXPECT_EQ(fp32_to_fp16(2.0f - std::ldexp(1.0f, -11)), 0x4000);
}

TEST(Fp16, OverflowBecomesInfinity) {
  EXPECT_EQ(fp32_to_fp16(from_bits(0x477FEFFF)), 0x7BFF);  // largest float below 65520
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);               // midway to 2^16: ties to even = inf
  EXPECT_EQ(fp32_to_fp16(-65520.0f), 0xFC00);
  EXPECT_EQ(fp32_to_fp16(1e10f), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::max()), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(fp16_to_fp32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp16_to_fp32(0xFC00), -std::numeric_limits<float>::infinity());
}

TEST(Fp16, Subnormals) {
  const float tiny = std::ldexp(1.0f, -24);                       // smallest half subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);         // midway 0 / 2^-24: even = 0
  EXPECT_EQ(fp32_to_fp16(-std::ldexp(1.0f, -25)), 0x8000);        // sign kept
  EXPECT_EQ(fp32_to_fp16(1.5f * std::ldexp(1.0f, -25)), 0x0001);  // above midway
  EXPECT_EQ(fp32_to_fp16(1.5f * tiny), 0x0002);                   // midway 1 / 2: even = 2
  EXPECT_EQ(fp32_to_fp16(2.5f * tiny), 0x0002);                   // midway 2 / 3: even = 2
  EXPECT_EQ(fp32_to_fp16(1023.0f * tiny), 0x03FF);                // largest subnormal
  EXPECT_EQ(fp32_to_fp16(1023.5f * tiny), 0x0400);                // midway to the smallest normal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(fp16_to_fp32(0x0001), tiny);
  EXPECT_EQ(fp16_to_fp32(0x03FF), 1023.0f * tiny);
  EXPECT_EQ(fp16_to_fp32(0x8200), -512.0f * tiny);
}

TEST(Fp16, NanStaysNan) {
  for (const std::uint32_t bits :
       {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7FFFFFFFu, 0x7F802000u}) {
    const std::uint16_t half = fp32_to_fp16(from_bits(bits));
    EXPECT_TRUE(is_fp16_nan(half)) << std::hex << bits << " -> " << half;
    EXPECT_EQ(half & 0x8000u, (bits >> 16) & 0x8000u) << "sign of " << std::hex << bits;
  }
  for (const std::uint16_t bits :
       {std::uint16_t(0x7E00), std::uint16_t(0x7C01), std::uint16_t(0xFE00)})
    EXPECT_TRUE(std::isnan(fp16_to_fp32(bits))) << std::hex << bits;
}

TEST(Fp16, EveryHalfDecodesToItsDefinitionAndRoundTrips) {
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto half = std::uint16_t(bits);
    const float decoded = fp16_to_fp32(half);
    if (is_fp16_nan(half)) {
      EXPECT_TRUE(std::isnan(decoded)) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(double(decoded), fp16_value(half)) << std::hex << bits;
    ASSERT_EQ(fp32_to_fp16(decoded), half) << std::hex << bits;
  }
}

// Nearest half to x by search over all finite halves in double; ties to the even pattern;
// |x| >= 65520 is infinity.
std::uint16_t nearest_fp16(float x, const std::vector<double>& positive_halves) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0x0000;
  const double magnitude = std::abs(double(x));
  if (magnitude >= 65520.0) return std::uint16_t(sign | 0x7C00);
  const auto above = std::lower_bound(positive_halves.begin(), positive_halves.end(), magnitude);
  auto index = std::size_t(above - positive_halves.begin());
  if (index > 0) {
    const double down = magnitude - positive_halves[index - 1],
                 up = positive_halves[index] - magnitude;
    if (down < up || (down == up && (index - 1) % 2 == 0)) --index;
  }
  return std::uint16_t(sign | index);  // positive halves 0x0000..0x7BFF are in pattern order
}

TEST(Fp16, RandomFloatsRoundToTheNearestHalf) {
  std::vector<double> positive_halves;
  for (std::uint16_t bits = 0; bits <= 0x7BFF; ++bits) positive_halves.push_back(fp16_value(bits));
  std::mt19937 rng(71);
  // Exponents spread over the half range and around it (2^-30 .. 2^17), random mantissas and signs.
  std::uniform_int_distribution<std::uint32_t> exponent(97, 144), mantissa(0, 0x7FFFFF), sign(0, 1);
  for (int i = 0; i < 300000; ++i) {
    const float x = from_bits((sign(rng) << 31) | (exponent(rng) << 23) | mantissa(rng));
    ASSERT_EQ(fp32_to_fp16(x), nearest_fp16(x, positive_halves)) << std::hexfloat << x;
  }
}

TEST(Bf16, KnownBitPatterns) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(fp32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(fp32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(fp32_to_bf16(3.140625f), 0x4049);  // pi truncated to 8 significant bits is exact
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_fp32(0x4049), 3.140625f);
  EXPECT_EQ(bf16_to_fp32(0x0001), from_bits(0x00010000));  // bf16 subnormal
}

TEST(Bf16, TiesRoundToEvenAndOverflowToInfinity) {
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F808000)), 0x3F80);  // midway, lsb even: down
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F818000)), 0x3F82);  // midway, lsb odd: up
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F808001)), 0x3F81);  // above midway
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F807FFF)), 0x3F80);  // below midway
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00008000)), 0x0000);  // subnormal tie to even zero
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00018000)), 0x0002);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x7F7F7FFF)), 0x7F7F);  // just below midway to 2^128
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(fp32_to_bf16(-std::numeric_limits<float>::max()), 0xFF80);
}

TEST(Bf16, NanStaysNan) {
  // 0x7F800001 and 0x7FFFFFFF would become infinity (0x7F80) or overflow the sign by naive
  // rounding.
  for (const std::uint32_t bits :
       {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7FFFFFFFu, 0xFFFFFFFFu}) {
    const std::uint16_t half = fp32_to_bf16(from_bits(bits));
    EXPECT_TRUE(is_bf16_nan(half)) << std::hex << bits << " -> " << half;
    EXPECT_EQ(half & 0x8000u, (bits >> 16) & 0x8000u) << "sign of " << std::hex << bits;
  }
  EXPECT_TRUE(std::isnan(bf16_to_fp32(0x7FC0)));
}

TEST(Bf16, RandomFloatsRoundToTheNearestBf16) {
  std::mt19937 rng(72);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  for (int i = 0; i < 300000; ++i) {
    const std::uint32_t bits = any_bits(rng);
    const float x = from_bits(bits);
    if (!std::isfinite(x)) continue;  // NaN and infinity have their own tests
    // Candidates: x truncated to bf16, and the next bf16 away from zero (2^128 stands in for the
    // pattern past the largest finite, which is infinity). Distances in double are exact.
    const std::uint32_t down_bits = bits & 0xFFFF0000u;
    const double down = std::abs(double(from_bits(down_bits)));
    const std::uint32_t up_bits = down_bits + 0x10000u;
    const double up = (up_bits & 0x7F800000u) == 0x7F800000u ? std::ldexp(1.0, 128)
                                                             : std::abs(double(from_bits(up_bits)));
    const double magnitude = std::abs(double(x));
    const bool round_up = magnitude - down > up - magnitude ||
                          (magnitude - down == up - magnitude && (down_bits & 0x10000u));
    const auto expected = std::uint16_t((round_up ? up_bits : down_bits) >> 16);
    ASSERT_EQ(fp32_to_bf16(x), expected) << std::hex << bits;
  }
}

TEST(Casts, ArraysMatchScalarConversions) {
  std::mt19937 rng(73);
  std::normal_distribution<float> normal(0.0f, 1000.0f);
  const std::size_t count = 70001;  // above the threading threshold
  std::vector<float> values(count);
  for (float& value : values) value = normal(rng);
  values[5] = std::numeric_limits<float>::quiet_NaN();
  values[6] = 70000.0f;
  std::vector<std::uint16_t> halves(count), brains(count);
  std::vector<float> from_halves(count), from_brains(count);
  cast_fp32_to_fp16(halves.data(), values.data(), count);
  cast_fp32_to_bf16(brains.data(), values.data(), count);
  cast_fp16_to_fp32(from_halves.data(), halves.data(), count);
  cast_bf16_to_fp32(from_brains.data(), brains.data(), count);
  for (std::size_t i = 0; i < count; ++i) {
    ASSERT_EQ(halves[i], fp32_to_fp16(values[i])) << i;
    ASSERT_EQ(brains[i], fp32_to_bf16(values[i])) << i;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(from_halves[i]),
              std::bit_cast<std::uint32_t>(fp16_to_fp32(halves[i])))
        << i;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(from_brains[i]), std::uint32_t(brains[i]) << 16) << i;
  }
  EXPECT_TRUE(std::isinf(from_halves[6]));
}

TEST(LossScaling, HasInfOrNanFindsEveryNonFiniteAndNothingElse) {
  const std::size_t count = 100000;  // above the threading threshold
  std::vector<float> data(count, 1.0f);
  data[10] = std::numeric_limits<float>::max();
  data[11] = -std::numeric_limits<float>::max();
  data[12] = std::numeric_limits<float>::denorm_min();
  EXPECT_FALSE(has_inf_or_nan(data.data(), count));
  EXPECT_FALSE(has_inf_or_nan(data.data(), 0));
  const float non_finite[] = {
      std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
      std::numeric_limits<float>::signaling_NaN()};
  for (const float bad : non_finite)
    for (const std::size_t position : {std::size_t(0), count / 2, count - 1}) {
      auto copy = data;
      copy[position] = bad;
      EXPECT_TRUE(has_inf_or_nan(copy.data(), count)) << bad << " at " << position;
      EXPECT_TRUE(has_inf_or_nan(copy.data() + position, 1));
    }
}

TEST(LossScaling, ScaleMultipliesEveryElement) {
  std::mt19937 rng(74);
  std::uniform_real_distribution<float> uniform(-10.0f, 10.0f);
  for (const std::size_t count : {std::size_t(13), std::size_t(70001)}) {
    std::vector<float> data(count);
    for (float& value : data) value = uniform(rng);
    const auto original = data;
    const float factor = 1.0f / 1024.0f + 3.0f;
    scale(data.data(), count, factor);
    // A product of two floats is exact in double; rounding it once to float is the IEEE product.
    for (std::size_t i = 0; i < count; ++i)
      ASSERT_EQ(data[i], float(double(original[i]) * double(factor))) << i;
  }
}

}  // namespace
}  // namespace zerolens::kernels
