// Causal attention: forward against the float64 definition, backward against the CPU backward
// (itself checked against finite differences in tests/kernels/test_attention.cpp).
#include "kernels/cuda/attention.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "cuda_test_support.hpp"
#include "kernels/attention.hpp"

namespace zerolens::kernels::cuda {
namespace {

using namespace zerolens::kernels::cuda::testing;  // cuda_test_support.hpp
using CudaAttention = CudaTest;

struct Reference {
  std::vector<double> out, scores, att;
};

// att[b,h,t,s] = softmax over s <= t of q[b,t,h]·k[b,s,h] / sqrt(hs); out[b,t,h] = sum_s att
// v[b,s,h].
Reference attention_reference(const std::vector<float>& qkv, const AttentionShape& shape) {
  const std::size_t B = shape.batch, T = shape.seq_len, C = shape.channels, NH = shape.heads,
                    hs = C / NH;
  Reference r{std::vector<double>(B * T * C), std::vector<double>(B * NH * T * T),
              std::vector<double>(B * NH * T * T, 0.0)};
  const auto at = [&](std::size_t b, std::size_t t, std::size_t part, std::size_t h,
                      std::size_t i) {
    return double(qkv[(b * T + t) * 3 * C + part * C + h * hs + i]);
  };
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < NH; ++h)
      for (std::size_t t = 0; t < T; ++t) {
        const std::size_t row = ((b * NH + h) * T + t) * T;
        double normalizer = 0.0;
        for (std::size_t s = 0; s <= t; ++s) {
          double score = 0.0;
          for (std::size_t i = 0; i < hs; ++i) score += at(b, t, 0, h, i) * at(b, s, 1, h, i);
          r.scores[row + s] = score / std::sqrt(double(hs));
          normalizer += std::exp(r.scores[row + s]);
        }
        for (std::size_t s = 0; s <= t; ++s)
          r.att[row + s] = std::exp(r.scores[row + s]) / normalizer;
        for (std::size_t i = 0; i < hs; ++i) {
          double sum = 0.0;
          for (std::size_t s = 0; s <= t; ++s) sum += r.att[row + s] * at(b, s, 2, h, i);
          r.out[(b * T + t) * C + h * hs + i] = sum;
        }
      }
  return r;
}

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
  const Reference reference = attention_reference(qkv, shape);
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
