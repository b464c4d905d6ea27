// GPU block quantization bit for bit against the CPU kernel (kernels/quantize.hpp), whose own tests
// hold it to the float64 bound: codes, scales and dequantized values, int8 and int4, blocks that
// do not divide the length (odd ones too, whose int4 bytes hold two blocks), zeros and non-finite
// values.
#include "kernels/cuda/quantize.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cuda_test_support.hpp"
#include "kernels/quantize.hpp"

namespace zerolens::kernels::cuda {
namespace {

using namespace zerolens::kernels::cuda::testing;  // cuda_test_support.hpp
using CudaQuantize = CudaTest;

std::vector<float> test_values(std::size_t count, std::mt19937& rng) {
  std::vector<float> values = random_floats(count, rng, -2.0f, 3.0f);
  for (std::size_t i = 0; i < std::min<std::size_t>(count, 40); ++i)
    values[i] = 0.0f;  // zero blocks
  if (count > 300) {
    values[200] = std::numeric_limits<float>::infinity();
    values[290] = std::numeric_limits<float>::quiet_NaN();
  }
  return values;
}

void expect_same_as_cpu(const std::vector<float>& in, std::size_t block, int bits) {
  const std::size_t bytes = quantized_code_bytes(in.size(), bits);
  const std::size_t blocks = quantization_blocks(in.size(), block);
  std::vector<std::uint8_t> codes(bytes);
  std::vector<float> scales(blocks), values(in.size());
  kernels::quantize_blocks(codes.data(), scales.data(), in.data(), in.size(), block, bits);
  kernels::dequantize_blocks(values.data(), codes.data(), scales.data(), in.size(), block, bits);

  const DeviceBuffer<float> device_in = to_device(in);
  DeviceBuffer<std::uint8_t> device_codes(bytes);
  DeviceBuffer<float> device_scales(blocks), device_values(in.size());
  quantize_blocks(device_codes.data(), device_scales.data(), device_in.data(), in.size(), block,
                  bits, nullptr);
  dequantize_blocks(device_values.data(), device_codes.data(), device_scales.data(), in.size(),
                    block, bits, nullptr);
  EXPECT_EQ(device_codes.download(), codes) << bits << " bits, blocks of " << block;
  const std::vector<float> gpu_scales = device_scales.download(),
                           gpu_values = device_values.download();
  for (std::size_t b = 0; b < blocks; ++b)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(gpu_scales[b]), std::bit_cast<std::uint32_t>(scales[b]))
        << "block " << b;
  for (std::size_t i = 0; i < in.size(); ++i)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(gpu_values[i]), std::bit_cast<std::uint32_t>(values[i]))
        << "element " << i;
}

TEST_F(CudaQuantize, CodesScalesAndValuesMatchTheCpuBitForBit) {
  std::mt19937 rng(7);
  for (const int bits : {8, 4}) {
    for (const std::size_t block :
         {std::size_t(1), std::size_t(7), std::size_t(64), std::size_t(8000)}) {
      expect_same_as_cpu(test_values(20001, rng), block, bits);
      expect_same_as_cpu(test_values(33, rng), block, bits);
    }
  }
}

TEST_F(CudaQuantize, DequantizeAddSumsOntoTheOutput) {
  std::mt19937 rng(8);
  const std::vector<float> in = random_floats(5000, rng);
  std::vector<float> sum = random_floats(in.size(), rng);
  std::vector<std::uint8_t> codes(quantized_code_bytes(in.size(), 4));
  std::vector<float> scales(quantization_blocks(in.size(), 96));
  kernels::quantize_blocks(codes.data(), scales.data(), in.data(), in.size(), 96, 4);
  DeviceBuffer<float> device_sum = to_device(sum);
  const DeviceBuffer<std::uint8_t> device_codes = to_device(codes);
  const DeviceBuffer<float> device_scales = to_device(scales);
  dequantize_add_blocks(device_sum.data(), device_codes.data(), device_scales.data(), in.size(), 96,
                        4, nullptr);
  kernels::dequantize_add_blocks(sum.data(), codes.data(), scales.data(), in.size(), 96, 4);
  EXPECT_EQ(device_sum.download(), sum);
}

}  // namespace
}  // namespace zerolens::kernels::cuda
