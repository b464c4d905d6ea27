// The GPT-2 encoder against the CPU kernel: the same additions in the same order, so equal to the bit
// (forward gathers; backward sums each token's rows in (b, t) order without atomics).
#include "kernels/cuda/embedding.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "cuda_test_support.hpp"
#include "kernels/embedding.hpp"

namespace zerolens::kernels::cuda {
namespace {

using namespace zerolens::kernels::cuda::testing;  // cuda_test_support.hpp
using CudaEmbedding = CudaTest;

constexpr std::size_t batch = 3, seq_len = 29, channels = 300, vocab = 11, positions = 40;

// Few distinct tokens, so every dwte row gathers many positions (and some none).
std::vector<int> repeating_tokens(std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(0, int(vocab) - 3);  // the last two tokens never appear
  std::vector<int> tokens(batch * seq_len);
  for (int& token : tokens) token = pick(rng);
  return tokens;
}

TEST_F(CudaEmbedding, ForwardEqualsTheCpuKernel) {
  std::mt19937 rng(5);
  const std::vector<int> tokens = repeating_tokens(rng);
  const std::vector<float> wte = random_floats(vocab * channels, rng), wpe = random_floats(positions * channels, rng);
  std::vector<float> expected(batch * seq_len * channels);
  kernels::encoder_forward(expected.data(), tokens.data(), wte.data(), wpe.data(), batch, seq_len, channels, vocab);
  const auto d_tokens = to_device(tokens);
  const auto d_wte = to_device(wte), d_wpe = to_device(wpe);
  DeviceBuffer<float> out(expected.size());
  encoder_forward(out.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), batch, seq_len, channels, vocab, nullptr);
  EXPECT_EQ(out.download(), expected);
}

TEST_F(CudaEmbedding, BackwardAccumulatesAsTheCpuKernelToTheBit) {
  std::mt19937 rng(6);
  const std::vector<int> tokens = repeating_tokens(rng);
  const std::vector<float> dout = random_floats(batch * seq_len * channels, rng);
  std::vector<float> dwte = random_floats(vocab * channels, rng), dwpe = random_floats(positions * channels, rng);
  const auto d_tokens = to_device(tokens);
  const auto d_dout = to_device(dout);
  auto d_dwte = to_device(dwte), d_dwpe = to_device(dwpe);
  kernels::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), batch, seq_len, channels, vocab);
  encoder_backward(d_dwte.data(), d_dwpe.data(), d_dout.data(), d_tokens.data(), batch, seq_len, channels, vocab,
                   nullptr);
  EXPECT_EQ(d_dwte.download(), dwte);
  EXPECT_EQ(d_dwpe.download(), dwpe);  // rows past seq_len untouched
}

}  // namespace
}  // namespace zerolens::kernels::cuda
