// Casts bit for bit against kernels/precision.hpp, and the one-pass unscale with its inf/nan flag.
#include "kernels/cuda/precision.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "cuda_test_support.hpp"
#include "kernels/precision.hpp"

namespace zerolens::kernels::cuda {
namespace {

using namespace zerolens::kernels::cuda::testing;  // cuda_test_support.hpp
using CudaCasts = CudaTest;
using CudaUnscale = CudaTest;

// Every exponent with varied mantissas (a prime stride through all 2^32 patterns), plus the edge
// cases: signed zeros, infinities, NaNs with payloads, fp32 subnormals, ties of both formats,
// fp16's overflow and subnormal thresholds.
std::vector<float> interesting_floats() {
  std::vector<std::uint32_t> bits = {
      0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u,
      0x7F800001u, 0xFF800001u, 0x7FBFFFFFu, 0x7FFFFFFFu, 0xFFFFFFFFu, 0x7FA01234u,
      0x00000001u, 0x80000001u, 0x007FFFFFu, 0x00400000u,   // fp32 subnormals
      0x3F808000u, 0x3F818000u, 0x3F80FFFFu, 0x7F7F8000u,   // bf16 ties, carry into infinity
      0x477FE000u, 0x477FEFFFu, 0x477FF000u, 0xC77FF000u,   // 65504, just below 65520, 65520
      0x38800000u, 0x387FFFFFu, 0x33800000u, 0x33000000u,   // 2^-14, below it, 2^-24, 2^-25
      0x33000001u, 0xB3000001u, 0x33C00000u, 0x34200000u};  // just above 2^-25, subnormal ties
  for (std::uint64_t pattern = 0; pattern < (std::uint64_t(1) << 32); pattern += 4099)
    bits.push_back(std::uint32_t(pattern));
  std::vector<float> values;
  for (std::uint32_t b : bits) values.push_back(std::bit_cast<float>(b));
  return values;
}

void expect_same_bits(const std::vector<std::uint16_t>& gpu, const std::vector<float>& in,
                      std::uint16_t (*cpu)(float), const char* what) {
  std::size_t mismatches = 0, first = 0;
  for (std::size_t i = 0; i < in.size(); ++i)
    if (gpu[i] != cpu(in[i]) && mismatches++ == 0) first = i;
  EXPECT_EQ(mismatches, 0u) << what << ": first input 0x" << std::hex
                            << std::bit_cast<std::uint32_t>(in[first]) << " gpu 0x" << gpu[first]
                            << " cpu 0x" << cpu(in[first]);
}

TEST_F(CudaCasts, Fp32ToHalfMatchesTheCpuCastBitForBit) {
  const std::vector<float> values = interesting_floats();
  const DeviceBuffer<float> in = to_device(values);
  DeviceBuffer<std::uint16_t> out(values.size());
  cast_to_half(out.data(), in.data(), values.size(), HalfFormat::bf16, nullptr);
  expect_same_bits(out.download(), values, fp32_to_bf16, "bf16");
  cast_to_half(out.data(), in.data(), values.size(), HalfFormat::fp16, nullptr);
  expect_same_bits(out.download(), values, fp32_to_fp16, "fp16");
}

TEST_F(CudaCasts, HalfToFp32MatchesTheCpuCastForAllPatterns) {
  std::vector<std::uint16_t> patterns(65536);
  for (std::size_t i = 0; i < patterns.size(); ++i) patterns[i] = std::uint16_t(i);
  const DeviceBuffer<std::uint16_t> in = to_device(patterns);
  DeviceBuffer<float> out(patterns.size());
  for (const auto& [format, cpu, name] : {std::tuple{HalfFormat::bf16, &bf16_to_fp32, "bf16"},
                                          std::tuple{HalfFormat::fp16, &fp16_to_fp32, "fp16"}}) {
    cast_from_half(out.data(), in.data(), patterns.size(), format, nullptr);
    const std::vector<float> gpu = out.download();
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < patterns.size(); ++i)
      mismatches +=
          std::bit_cast<std::uint32_t>(gpu[i]) != std::bit_cast<std::uint32_t>(cpu(patterns[i]));
    EXPECT_EQ(mismatches, 0u) << name;
  }
}

int read_flag(const DeviceBuffer<int>& flag) {
  return flag.download()[0];
}

TEST_F(CudaUnscale, Fp32MultipliesAndFlagsOnlyNonFinite) {
  std::mt19937 rng(3);
  std::vector<float> grads = random_floats(100003, rng, -4096.0f, 4096.0f);
  const float inverse = 1.0f / 1024.0f;
  DeviceBuffer<float> device_grads = to_device(grads);
  DeviceBuffer<int> flag = to_device(std::vector<int>{0});
  unscale_grads(device_grads.data(), grads.size(), inverse, flag.data(), nullptr);
  const std::vector<float> unscaled = device_grads.download();
  for (std::size_t i = 0; i < grads.size(); ++i) ASSERT_EQ(unscaled[i], grads[i] * inverse) << i;
  EXPECT_EQ(read_flag(flag), 0);

  for (const float bad :
       {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> poisoned = grads;
    poisoned[77777] = bad;
    device_grads.upload(poisoned);
    flag.upload({0});
    unscale_grads(device_grads.data(), poisoned.size(), inverse, flag.data(), nullptr);
    EXPECT_EQ(read_flag(flag), 1) << bad;
  }
  // A finite gradient that overflows when multiplied is flagged too.
  device_grads.upload(std::vector<float>(grads.size(), 3e38f));
  flag.upload({0});
  unscale_grads(device_grads.data(), grads.size(), 2.0f, flag.data(), nullptr);
  EXPECT_EQ(read_flag(flag), 1);
  // The flag is only ever set: a clean tensor after a poisoned one leaves it at 1.
  device_grads.upload(grads);
  unscale_grads(device_grads.data(), grads.size(), inverse, flag.data(), nullptr);
  EXPECT_EQ(read_flag(flag), 1);
}

TEST_F(CudaUnscale, HalfGradientsUnscaleIntoFp32) {
  std::mt19937 rng(4);
  const std::vector<float> values = random_floats(65537, rng, -60000.0f, 60000.0f);
  for (const auto& [format, to_half, to_float, infinity] :
       {std::tuple{HalfFormat::bf16, &fp32_to_bf16, &bf16_to_fp32, std::uint16_t(0x7F80)},
        std::tuple{HalfFormat::fp16, &fp32_to_fp16, &fp16_to_fp32, std::uint16_t(0x7C00)}}) {
    std::vector<std::uint16_t> half(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) half[i] = to_half(values[i]);
    DeviceBuffer<std::uint16_t> grads = to_device(half);
    DeviceBuffer<float> out(half.size());
    DeviceBuffer<int> flag = to_device(std::vector<int>{0});
    const float inverse = 1.0f / 65536.0f;
    unscale_grads(out.data(), grads.data(), format, half.size(), inverse, flag.data(), nullptr);
    const std::vector<float> unscaled = out.download();
    for (std::size_t i = 0; i < half.size(); ++i)
      ASSERT_EQ(unscaled[i], to_float(half[i]) * inverse) << i;
    EXPECT_EQ(read_flag(flag), 0);
    half[12345] = infinity;
    grads.upload(half);
    unscale_grads(out.data(), grads.data(), format, half.size(), inverse, flag.data(), nullptr);
    EXPECT_EQ(read_flag(flag), 1);
  }
}

}  // namespace
}  // namespace zerolens::kernels::cuda
