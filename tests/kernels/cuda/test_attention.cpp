// Causal attention: forward against the float64 definition, backward against the CPU backward
// (itself checked against finite differences in tests/kernels/test_attention.cpp).
#include "kernels/cuda/attention.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "../attention_reference.hpp"
#include "cuda_test_support.hpp"
#include "kernels/attention.hpp"

namespace zerolens::kernels::cuda {
namespace {

using namespace zerolens::kernels::cuda::testing;  // cuda_test_support.hpp
using CudaAttention = CudaTest;
using zerolens::kernels::testing::attention_reference;

constexpr AttentionShape shape{2, 37, 48, 4};  // T not a multiple of the warp; head size 12
constexpr std::size_t qkv_size = 2 * 37 * 3 * 48, out_size = 2 * 37 * 48,
                      score_size = 2 * 4 * 37 * 37;

TEST_F(CudaAttention, ForwardMatchesFloat64WithMaskedScores) {
  std::mt19937 rng(31);
  const std::vector<float> qkv = random_floats(qkv_size, rng, -2.0f, 2.0f);
  const auto d_qkv = to_device(qkv);
  DeviceBuffer<float> out(out_size), preatt(score_size), att(score_size);
  BlasHandles handles;
  attention_forward(out.data(), preatt.data(), att.data(), d_qkv.data(), shape, handles, nullptr);
  const auto reference = attention_reference(std::vector<double>(qkv.begin(), qkv.end()), shape);
  expect_close(out.download(), reference.out, 1e-4, 1e-5, "out");
  expect_close(att.download(), reference.att, 1e-4, 1e-6, "att");
  const std::vector<float> scores = preatt.download();
  const std::size_t T = shape.seq_len;
  for (std::size_t i = 0; i < scores.size(); ++i) {
    const std::size_t t = (i / T) % T, s = i % T;
    if (s > t)
      ASSERT_EQ(scores[i], -std::numeric_limits<float>::infinity()) << "masked preatt " << i;
    else
      ASSERT_NEAR(scores[i], reference.scores[i], 1e-5 + 1e-5 * std::abs(reference.scores[i])) << i;
  }
}

TEST_F(CudaAttention, BackwardMatchesTheCpuBackwardAndAccumulates) {
  std::mt19937 rng(32);
  const std::vector<float> qkv = random_floats(qkv_size, rng, -2.0f, 2.0f),
                           dout = random_floats(out_size, rng),
                           dinp0 = random_floats(qkv_size, rng);
  std::vector<float> out(out_size), preatt(score_size), att(score_size), dinp = dinp0;
  kernels::attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), shape);
  kernels::attention_backward(dinp.data(), dout.data(), qkv.data(), att.data(), shape);

  const auto d_qkv = to_device(qkv), d_dout = to_device(dout), d_att = to_device(att);
  auto d_dinp = to_device(dinp0);
  DeviceBuffer<float> dscores(score_size);
  BlasHandles handles;
  attention_backward(d_dinp.data(), dscores.data(), d_dout.data(), d_qkv.data(), d_att.data(),
                     shape, handles, nullptr);
  expect_close(d_dinp.download(), to_double(dinp), 1e-4, 1e-5, "dqkv");
}

TEST_F(CudaAttention, HeadsMustDivideChannels) {
  BlasHandles handles;
  EXPECT_THROW(
      attention_forward(nullptr, nullptr, nullptr, nullptr, {1, 4, 10, 3}, handles, nullptr),
      std::invalid_argument);
}

}  // namespace
}  // namespace zerolens::kernels::cuda
