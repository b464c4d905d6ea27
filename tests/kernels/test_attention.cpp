#include "kernels/attention.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "attention_reference.hpp"
#include "kernel_test_support.hpp"

namespace zerolens::kernels {
namespace {

using namespace zerolens::kernels::testing;  // kernel_test_support.hpp

std::size_t qkv_size(const AttentionShape& shape) {
  return shape.batch * shape.seq_len * 3 * shape.channels;
}
std::size_t out_size(const AttentionShape& shape) {
  return shape.batch * shape.seq_len * shape.channels;
}
std::size_t score_size(const AttentionShape& shape) {
  return shape.batch * shape.heads * shape.seq_len * shape.seq_len;
}

void check_forward(const AttentionShape& shape, std::mt19937& rng) {
  const auto qkv = random_floats(qkv_size(shape), rng, -2.0f, 2.0f);
  std::vector<float> out(out_size(shape), 5.0f), preatt(score_size(shape), 5.0f),
      att(score_size(shape), 5.0f);
  attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), shape);
  const auto reference = attention_reference(to_double(qkv), shape);
  expect_close(out, reference.out, 1e-4, 1e-5, "out");
  expect_close(att, reference.att, 1e-4, 1e-6, "att");
  // preatt: the scores on and below the diagonal, -infinity above it.
  const std::size_t T = shape.seq_len;
  for (std::size_t i = 0; i < preatt.size(); ++i) {
    const std::size_t t = (i / T) % T, s = i % T;
    if (s > t) {
      EXPECT_EQ(preatt[i], -std::numeric_limits<float>::infinity()) << "masked preatt " << i;
    } else {
      EXPECT_NEAR(preatt[i], reference.scores[i], 1e-5 + 1e-5 * std::abs(reference.scores[i]))
          << "preatt " << i;
    }
  }
}

TEST(Attention, ForwardMatchesFloat64Reference) {
  std::mt19937 rng(31);
  check_forward({2, 5, 12, 3}, rng);
}

TEST(Attention, ForwardMatchesFloat64ReferenceOnThreadedShape) {
  std::mt19937 rng(32);
  check_forward({2, 40, 32, 4}, rng);
}

TEST(Attention, FirstPositionAttendsOnlyToItself) {
  std::mt19937 rng(33);
  const AttentionShape shape{1, 3, 4, 2};
  const auto qkv = random_floats(qkv_size(shape), rng);
  std::vector<float> out(out_size(shape)), preatt(score_size(shape)), att(score_size(shape));
  attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), shape);
  // Query 0 sees only key 0, so its output is exactly value 0.
  for (std::size_t c = 0; c < shape.channels; ++c)
    EXPECT_FLOAT_EQ(out[c], qkv[2 * shape.channels + c]);
  EXPECT_FLOAT_EQ(att[0], 1.0f);
}

void check_backward(const AttentionShape& shape, std::size_t sampled, std::mt19937& rng) {
  const auto qkv = random_floats(qkv_size(shape), rng, -2.0f, 2.0f);
  const auto probe = random_floats(out_size(shape), rng);
  std::vector<float> out(out_size(shape)), preatt(score_size(shape)), att(score_size(shape));
  attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), shape);
  const auto dinp_before = random_floats(qkv.size(), rng);
  auto dinp = dinp_before;
  attention_backward(dinp.data(), probe.data(), qkv.data(), att.data(), shape);

  auto qkv_d = to_double(qkv);
  const auto probe_d = to_double(probe);
  const auto objective = [&] { return dot(probe_d, attention_reference(qkv_d, shape).out); };
  const auto indices =
      sampled > 0 ? random_indices(qkv.size(), sampled, rng) : std::vector<std::size_t>{};
  const auto expected = finite_difference_gradient(qkv_d, objective, indices);
  const auto actual = accumulated(dinp, dinp_before);
  expect_close(indices.empty() ? actual : gather(actual, indices), expected, 1e-3, 1e-5, "dqkv");
}

TEST(Attention, BackwardMatchesFiniteDifferencesAndAccumulates) {
  std::mt19937 rng(34);
  check_backward({2, 5, 12, 3}, 0, rng);
}

TEST(Attention, BackwardOnThreadedShapeMatchesSampledFiniteDifferences) {
  std::mt19937 rng(35);
  check_backward({2, 40, 32, 4}, 150, rng);
}

TEST(Attention, RejectsChannelsNotDivisibleByHeads) {
  const AttentionShape shape{1, 2, 10, 3};
  std::vector<float> qkv(qkv_size(shape)), out(out_size(shape)), scores(score_size(shape)),
      att(score_size(shape));
  EXPECT_THROW(attention_forward(out.data(), scores.data(), att.data(), qkv.data(), shape),
               std::invalid_argument);
  EXPECT_THROW(attention_backward(qkv.data(), out.data(), qkv.data(), att.data(), shape),
               std::invalid_argument);
}

TEST(Attention, BackwardWithScoreBufferEqualsBackwardWithout) {
  std::mt19937 rng(36);
  const AttentionShape shape{2, 9, 12, 3};
  const auto qkv = random_floats(qkv_size(shape), rng, -2.0f, 2.0f);
  const auto probe = random_floats(out_size(shape), rng);
  std::vector<float> out(out_size(shape)), preatt(score_size(shape)), att(score_size(shape));
  attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), shape);
  const auto dinp_before = random_floats(qkv.size(), rng);
  auto without = dinp_before, with = dinp_before;
  std::vector<float> dscores(score_size(shape), 123.0f);  // overwritten, whatever it held
  attention_backward(without.data(), probe.data(), qkv.data(), att.data(), shape);
  attention_backward(with.data(), dscores.data(), probe.data(), qkv.data(), att.data(), shape);
  EXPECT_EQ(with, without);
}

}  // namespace
}  // namespace zerolens::kernels
