#include "kernels/embedding.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

#include "kernel_test_support.hpp"

namespace zerolens::kernels {
namespace {

using namespace zerolens::kernels::testing;  // kernel_test_support.hpp

constexpr std::size_t batch = 2, seq_len = 3, channels = 4, vocab = 5, max_positions = 6;
// Token 3 appears three times (twice in one sequence): its gradient row must sum all three.
const std::vector<int> tokens = {3, 0, 3, 4, 3, 1};

std::vector<double> encoder_reference(const std::vector<double>& wte,
                                      const std::vector<double>& wpe) {
  std::vector<double> out(batch * seq_len * channels);
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t t = 0; t < seq_len; ++t)
      for (std::size_t c = 0; c < channels; ++c)
        out[(b * seq_len + t) * channels + c] =
            wte[std::size_t(tokens[b * seq_len + t]) * channels + c] + wpe[t * channels + c];
  return out;
}

TEST(Encoder, ForwardAddsTokenAndPositionRows) {
  std::mt19937 rng(41);
  const auto wte = random_floats(vocab * channels, rng),
             wpe = random_floats(max_positions * channels, rng);
  std::vector<float> out(batch * seq_len * channels, 9.0f);
  encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), batch, seq_len, channels,
                  vocab);
  expect_close(out, encoder_reference(to_double(wte), to_double(wpe)), 1e-7, 0.0, "out");
}

TEST(Encoder, BackwardMatchesFiniteDifferencesAndAccumulatesRepeatedTokens) {
  std::mt19937 rng(42);
  const auto wte = random_floats(vocab * channels, rng),
             wpe = random_floats(max_positions * channels, rng);
  const auto probe = random_floats(batch * seq_len * channels, rng);
  const auto dwte_before = random_floats(wte.size(), rng),
             dwpe_before = random_floats(wpe.size(), rng);
  auto dwte = dwte_before, dwpe = dwpe_before;
  encoder_backward(dwte.data(), dwpe.data(), probe.data(), tokens.data(), batch, seq_len, channels,
                   vocab);

  auto wte_d = to_double(wte), wpe_d = to_double(wpe);
  const auto probe_d = to_double(probe);
  const auto objective = [&] { return dot(probe_d, encoder_reference(wte_d, wpe_d)); };
  // Unused token rows (2) and positions >= T get exactly zero added: the finite differences say so
  // too.
  expect_close(accumulated(dwte, dwte_before), finite_difference_gradient(wte_d, objective), 1e-5,
               1e-6, "dwte");
  expect_close(accumulated(dwpe, dwpe_before), finite_difference_gradient(wpe_d, objective), 1e-5,
               1e-6, "dwpe");
}

TEST(Encoder, RejectsTokensOutsideTheVocabulary) {
  std::vector<float> wte(vocab * channels), wpe(max_positions * channels), out(channels);
  for (const int bad : {-1, int(vocab)}) {
    const int token[] = {bad};
    EXPECT_THROW(encoder_forward(out.data(), token, wte.data(), wpe.data(), 1, 1, channels, vocab),
                 std::out_of_range);
    EXPECT_THROW(encoder_backward(wte.data(), wpe.data(), out.data(), token, 1, 1, channels, vocab),
                 std::out_of_range);
  }
}

}  // namespace
}  // namespace zerolens::kernels
