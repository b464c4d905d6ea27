#include "kernels/loss.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernel_test_support.hpp"

namespace zerolens::kernels {
namespace {

using namespace zerolens::kernels::testing;  // kernel_test_support.hpp

struct LossReference {
  std::vector<double> losses, probs;
};

// softmax and -log softmax[target] in float64 via logsumexp.
LossReference crossentropy_reference(const std::vector<double>& logits,
                                     const std::vector<int>& targets, std::size_t vocab) {
  const std::size_t rows = targets.size();
  LossReference result{std::vector<double>(rows), std::vector<double>(rows * vocab)};
  for (std::size_t r = 0; r < rows; ++r) {
    double max_logit = logits[r * vocab];
    for (std::size_t v = 0; v < vocab; ++v) max_logit = std::max(max_logit, logits[r * vocab + v]);
    double normalizer = 0.0;
    for (std::size_t v = 0; v < vocab; ++v)
      normalizer += std::exp(logits[r * vocab + v] - max_logit);
    const double log_normalizer = max_logit + std::log(normalizer);
    for (std::size_t v = 0; v < vocab; ++v)
      result.probs[r * vocab + v] = std::exp(logits[r * vocab + v] - log_normalizer);
    result.losses[r] = log_normalizer - logits[r * vocab + std::size_t(targets[r])];
  }
  return result;
}

TEST(CrossEntropy, ForwardMatchesFloat64Reference) {
  std::mt19937 rng(51);
  const std::size_t vocab = 11;
  const std::vector<int> targets = {0, 10, 3, 3, 7, 1, 5};
  auto logits = random_floats(targets.size() * vocab, rng, -4.0f, 4.0f);
  // Row 1: the target's probability (e^-200) underflows float; the loss must still be finite (200).
  for (std::size_t v = 0; v < vocab; ++v)
    logits[vocab + v] = v == 10 ? -100.0f : (v == 2 ? 100.0f : 0.0f);
  std::vector<float> losses(targets.size(), 3.0f), probs(logits.size(), 3.0f);
  crossentropy_softmax_forward(losses.data(), probs.data(), logits.data(), targets.data(),
                               targets.size(), vocab);
  const auto reference = crossentropy_reference(to_double(logits), targets, vocab);
  expect_close(losses, reference.losses, 1e-5, 1e-6, "losses");
  expect_close(probs, reference.probs, 1e-5, 1e-7, "probs");
  EXPECT_NEAR(losses[1], 200.0f, 1e-3f);
}

TEST(CrossEntropy, ForwardOnGpt2SizedVocabularyIsNormalized) {
  std::mt19937 rng(52);
  const std::size_t vocab = 50257;
  const std::vector<int> targets = {50256, 0};
  const auto logits = random_floats(targets.size() * vocab, rng, -10.0f, 10.0f);
  std::vector<float> losses(targets.size()), probs(logits.size());
  crossentropy_softmax_forward(losses.data(), probs.data(), logits.data(), targets.data(),
                               targets.size(), vocab);
  const auto reference = crossentropy_reference(to_double(logits), targets, vocab);
  expect_close(losses, reference.losses, 1e-5, 1e-5, "losses");
  expect_close(probs, reference.probs, 1e-4, 1e-9, "probs");
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferencesAndAccumulates) {
  std::mt19937 rng(53);
  const std::size_t vocab = 9;
  const std::vector<int> targets = {8, 0, 4, 4, 2};
  const auto logits = random_floats(targets.size() * vocab, rng, -3.0f, 3.0f);
  // dloss per position: a random functional of the losses (the mean loss is the case 1 / rows).
  const auto dlosses = random_floats(targets.size(), rng);
  std::vector<float> losses(targets.size()), probs(logits.size());
  crossentropy_softmax_forward(losses.data(), probs.data(), logits.data(), targets.data(),
                               targets.size(), vocab);
  const auto dlogits_before = random_floats(logits.size(), rng);
  auto dlogits = dlogits_before;
  crossentropy_softmax_backward(dlogits.data(), dlosses.data(), probs.data(), targets.data(),
                                targets.size(), vocab);

  auto logits_d = to_double(logits);
  const auto dlosses_d = to_double(dlosses);
  const auto objective = [&] {
    return dot(dlosses_d, crossentropy_reference(logits_d, targets, vocab).losses);
  };
  expect_close(accumulated(dlogits, dlogits_before),
               finite_difference_gradient(logits_d, objective), 1e-4, 1e-6, "dlogits");
}

TEST(CrossEntropy, RejectsTargetsOutsideTheVocabulary) {
  const std::size_t vocab = 4;
  std::vector<float> logits(vocab), probs(vocab), losses(1), dlosses(1, 1.0f);
  for (const int bad : {-1, int(vocab)}) {
    const int target[] = {bad};
    EXPECT_THROW(
        crossentropy_softmax_forward(losses.data(), probs.data(), logits.data(), target, 1, vocab),
        std::out_of_range);
    EXPECT_THROW(crossentropy_softmax_backward(logits.data(), dlosses.data(), probs.data(), target,
                                               1, vocab),
                 std::out_of_range);
  }
}

// The vocabulary split over 3 ranks of 4 rows each (12 >= vocab 11: the last rank's last row pads
// the vocabulary), the group's reductions done here by hand: the losses and probabilities are the
// whole vocabulary's softmax (float64 reference), the padding takes no part, and the backward is
// the whole backward's columns.
TEST(CrossEntropy, VocabularyShardsGiveTheWholeSoftmax) {
  std::mt19937 rng(54);
  const std::size_t vocab = 11, shard = 4, ranks = 3;
  const std::vector<int> targets = {0, 10, 3, 4, 7, 8};
  const std::size_t rows = targets.size();
  const auto logits = random_floats(rows * vocab, rng, -4.0f, 4.0f);
  const auto reference = crossentropy_reference(to_double(logits), targets, vocab);
  std::vector<std::vector<float>> parts(ranks, std::vector<float>(rows * shard, 99.0f));
  std::vector<float> row_max(rows, -1e30f), part_max(rows);
  for (std::size_t r = 0; r < ranks; ++r) {
    for (std::size_t row = 0; row < rows; ++row)
      for (std::size_t v = 0; v < shard && r * shard + v < vocab; ++v)
        parts[r][row * shard + v] = logits[row * vocab + r * shard + v];
    crossentropy_shard_max(part_max.data(), parts[r].data(), rows, shard,
                           std::min(shard, vocab - r * shard));
    for (std::size_t row = 0; row < rows; ++row)
      row_max[row] = std::max(row_max[row], part_max[row]);
  }
  std::vector<float> sums(rows, 0.0f), target_logits(rows, 0.0f), part_sums(rows),
      part_targets(rows);
  std::vector<std::vector<float>> probs(ranks, std::vector<float>(rows * shard));
  for (std::size_t r = 0; r < ranks; ++r) {
    crossentropy_shard_sums(part_sums.data(), part_targets.data(), probs[r].data(), parts[r].data(),
                            row_max.data(), targets.data(), r * shard, rows, shard,
                            std::min(shard, vocab - r * shard));
    for (std::size_t row = 0; row < rows; ++row) {
      sums[row] += part_sums[row];
      target_logits[row] += part_targets[row];
    }
  }
  const auto dlosses = random_floats(rows, rng);
  std::vector<float> whole_probs(rows * vocab), whole_losses(rows), dlogits(rows * vocab, 0.0f);
  crossentropy_softmax_forward(whole_losses.data(), whole_probs.data(), logits.data(),
                               targets.data(), rows, vocab);
  crossentropy_softmax_backward(dlogits.data(), dlosses.data(), whole_probs.data(), targets.data(),
                                rows, vocab);
  for (std::size_t r = 0; r < ranks; ++r) {
    std::vector<float> losses(rows);
    crossentropy_shard_finish(losses.data(), probs[r].data(), sums.data(), row_max.data(),
                              target_logits.data(), rows, shard);
    expect_close(losses, reference.losses, 1e-5, 1e-6, "losses");
    std::vector<float> dpart(rows * shard, 0.0f);
    crossentropy_shard_backward(dpart.data(), dlosses.data(), probs[r].data(), targets.data(),
                                r * shard, rows, shard);
    for (std::size_t row = 0; row < rows; ++row) {
      for (std::size_t v = 0; v < shard; ++v) {
        const std::size_t token = r * shard + v;
        if (token >= vocab) {  // padding: no probability, no gradient
          EXPECT_EQ(probs[r][row * shard + v], 0.0f);
          EXPECT_EQ(dpart[row * shard + v], 0.0f);
          continue;
        }
        EXPECT_NEAR(probs[r][row * shard + v], reference.probs[row * vocab + token], 1e-6);
        EXPECT_NEAR(dpart[row * shard + v], dlogits[row * vocab + token], 1e-6);
      }
    }
  }
}

}  // namespace
}  // namespace zerolens::kernels
