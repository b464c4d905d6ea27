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

// The token table split in two (rows 0-2 and 3-4): the parts' lookups add up to the whole
// lookup, and their backward fills each part's rows as the whole backward does; positions of
// token rows 2.. 5 of [2, 3] batches are 2, 0, 1, 2.
TEST(Encoder, VocabularyPartsAndPositionsAddUpToTheEncoder) {
  std::mt19937 rng(43);
  const auto wte = random_floats(vocab * channels, rng),
             wpe = random_floats(max_positions * channels, rng);
  const std::size_t count = batch * seq_len, split = 3;
  std::vector<float> whole(count * channels), sum(count * channels, 0.0f), part(count * channels);
  encoder_forward(whole.data(), tokens.data(), wte.data(), wpe.data(), batch, seq_len, channels,
                  vocab);
  for (const auto& [first, rows] :
       {std::pair<std::size_t, std::size_t>{0, split}, {split, vocab - split}}) {
    embedding_range_forward(part.data(), tokens.data(), count, wte.data() + first * channels, first,
                            rows, channels);
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  position_forward(sum.data(), wpe.data(), 0, count, seq_len, channels);
  for (std::size_t i = 0; i < sum.size(); ++i) EXPECT_EQ(sum[i], whole[i]) << i;

  const auto dout = random_floats(count * channels, rng);
  std::vector<float> dwte(wte.size(), 0.0f), dwpe(wpe.size(), 0.0f);
  encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), batch, seq_len, channels,
                   vocab);
  std::vector<float> dparts(wte.size(), 0.0f), dpositions(wpe.size(), 0.0f);
  embedding_range_backward(dparts.data(), dout.data(), tokens.data(), count, 0, split, channels);
  embedding_range_backward(dparts.data() + split * channels, dout.data(), tokens.data(), count,
                           split, vocab - split, channels);
  position_backward(dpositions.data(), dout.data() + 2 * channels, 2, count - 2, seq_len, channels);
  for (std::size_t i = 0; i < dwte.size(); ++i) EXPECT_NEAR(dparts[i], dwte[i], 1e-6) << i;
  for (std::size_t c = 0; c < channels; ++c) {
    // rows 2..5 are positions 2, 0, 1, 2: position 2 twice, 0 and 1 once each
    EXPECT_NEAR(dpositions[2 * channels + c], dout[2 * channels + c] + dout[5 * channels + c],
                1e-6);
    EXPECT_NEAR(dpositions[0 * channels + c], dout[3 * channels + c], 1e-6);
    EXPECT_NEAR(dpositions[1 * channels + c], dout[4 * channels + c], 1e-6);
  }
}

}  // namespace
}  // namespace zerolens::kernels
