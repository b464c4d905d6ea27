// Softmax cross-entropy forward against float64, backward against its definition.
#include "kernels/cuda/loss.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda_test_support.hpp"

namespace zerolens::kernels::cuda {
namespace {

using namespace zerolens::kernels::cuda::testing;  // cuda_test_support.hpp
using CudaLoss = CudaTest;

constexpr std::size_t rows = 6, vocab = 50257;  // GPT-2's vocabulary: not a multiple of the block

TEST_F(CudaLoss, ForwardMatchesFloat64EvenWhenTheTargetUnderflows) {
  std::mt19937 rng(41);
  std::vector<float> logits = random_floats(rows * vocab, rng, -5.0f, 5.0f);
  std::vector<int> targets = {0, 17, 50256, 1234, 999, 42};
  logits[3 * vocab + 77] = 200.0f;  // row 3: the target's probability underflows in float
  const auto d_logits = to_device(logits);
  const auto d_targets = to_device(targets);
  DeviceBuffer<float> losses(rows), probs(rows * vocab);
  crossentropy_softmax_forward(losses.data(), probs.data(), d_logits.data(), d_targets.data(), rows,
                               vocab, nullptr);
  std::vector<double> expected_losses(rows), expected_probs(rows * vocab);
  for (std::size_t r = 0; r < rows; ++r) {
    double maximum = -INFINITY, sum = 0.0;
    for (std::size_t v = 0; v < vocab; ++v)
      maximum = std::max(maximum, double(logits[r * vocab + v]));
    for (std::size_t v = 0; v < vocab; ++v) sum += std::exp(logits[r * vocab + v] - maximum);
    for (std::size_t v = 0; v < vocab; ++v)
      expected_probs[r * vocab + v] = std::exp(logits[r * vocab + v] - maximum) / sum;
    expected_losses[r] = std::log(sum) + maximum - logits[r * vocab + std::size_t(targets[r])];
  }
  expect_close(losses.download(), expected_losses, 1e-5, 1e-5, "losses");
  expect_close(probs.download(), expected_probs, 1e-4, 1e-10, "probs");
  EXPECT_TRUE(std::isfinite(losses.download()[3]));
}

TEST_F(CudaLoss, AnOutOfRangeTargetGivesANanLoss) {
  const std::vector<float> logits(2 * 10, 0.5f);
  const auto d_logits = to_device(logits);
  const auto d_targets = to_device(std::vector<int>{10, -1});
  DeviceBuffer<float> losses(2), probs(logits.size());
  crossentropy_softmax_forward(losses.data(), probs.data(), d_logits.data(), d_targets.data(), 2,
                               10, nullptr);
  const std::vector<float> result = losses.download();
  EXPECT_TRUE(std::isnan(result[0]));
  EXPECT_TRUE(std::isnan(result[1]));
}

TEST_F(CudaLoss, BackwardAccumulatesProbsMinusOneHotTimesDloss) {
  std::mt19937 rng(42);
  const std::vector<float> probs = random_floats(rows * vocab, rng, 0.0f, 1e-3f),
                           dlosses = random_floats(rows, rng, 0.1f, 1.0f),
                           dlogits0 = random_floats(rows * vocab, rng);
  const std::vector<int> targets = {5, 0, 50256, 3, 3, 40000};
  auto dlogits = to_device(dlogits0);
  const auto d_probs = to_device(probs), d_dlosses = to_device(dlosses);
  const auto d_targets = to_device(targets);
  crossentropy_softmax_backward(dlogits.data(), d_dlosses.data(), d_probs.data(), d_targets.data(),
                                rows, vocab, nullptr);
  std::vector<double> expected(rows * vocab);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t v = 0; v < vocab; ++v) {
      const std::size_t i = r * vocab + v;
      const double onehot = v == std::size_t(targets[r]) ? 1.0 : 0.0;
      expected[i] = dlogits0[i] + (probs[i] - onehot) * dlosses[r];
    }
  expect_close(dlogits.download(), expected, 1e-6, 1e-7, "dlogits");
}

}  // namespace
}  // namespace zerolens::kernels::cuda
