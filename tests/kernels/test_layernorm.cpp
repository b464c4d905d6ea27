#include "kernels/layernorm.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_support.hpp"

namespace zerolens::kernels {
namespace {

using namespace zerolens::kernels::testing;  // kernel_test_support.hpp

struct LayerNormReference {
  std::vector<double> out, mean, rstd;
};

// Textbook LayerNorm in float64: biased variance, eps inside the square root.
LayerNormReference layernorm_reference(const std::vector<double>& inp,
                                       const std::vector<double>& weight,
                                       const std::vector<double>& bias, std::size_t rows,
                                       std::size_t channels) {
  LayerNormReference result{std::vector<double>(rows * channels), std::vector<double>(rows),
                            std::vector<double>(rows)};
  for (std::size_t r = 0; r < rows; ++r) {
    double mean = 0.0;
    for (std::size_t c = 0; c < channels; ++c) mean += inp[r * channels + c];
    mean /= double(channels);
    double variance = 0.0;
    for (std::size_t c = 0; c < channels; ++c)
      variance += std::pow(inp[r * channels + c] - mean, 2);
    variance /= double(channels);
    const double rstd = 1.0 / std::sqrt(variance + 1e-5);
    for (std::size_t c = 0; c < channels; ++c)
      result.out[r * channels + c] = (inp[r * channels + c] - mean) * rstd * weight[c] + bias[c];
    result.mean[r] = mean;
    result.rstd[r] = rstd;
  }
  return result;
}

// Inputs with a large common offset: a one-pass E[x^2] - E[x]^2 variance in float would lose
// digits.
std::vector<float> offset_inputs(std::size_t count, std::mt19937& rng) {
  auto values = random_floats(count, rng, -1.0f, 1.0f);
  for (float& value : values) value += 30.0f;
  return values;
}

TEST(LayerNorm, ForwardMatchesFloat64ReferenceAndSavesStatistics) {
  std::mt19937 rng(11);
  const std::size_t rows = 9, channels = 48;
  const auto inp = offset_inputs(rows * channels, rng);
  const auto weight = random_floats(channels, rng, 0.5f, 1.5f), bias = random_floats(channels, rng);
  std::vector<float> out(inp.size(), 7.0f), mean(rows), rstd(rows);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(),
                    rows, channels);
  const auto reference =
      layernorm_reference(to_double(inp), to_double(weight), to_double(bias), rows, channels);
  expect_close(out, reference.out, 1e-4, 1e-4, "out");
  expect_close(mean, reference.mean, 1e-6, 0.0, "mean");
  expect_close(rstd, reference.rstd, 1e-5, 0.0, "rstd");
}

TEST(LayerNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  std::mt19937 rng(12);
  const std::size_t rows = 5, channels = 8;
  const auto inp = random_floats(rows * channels, rng, -2.0f, 2.0f);
  const auto weight = random_floats(channels, rng, 0.5f, 1.5f), bias = random_floats(channels, rng);
  const auto probe = random_floats(inp.size(), rng);

  std::vector<float> out(inp.size()), mean(rows), rstd(rows);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(),
                    rows, channels);
  const auto dinp_before = random_floats(inp.size(), rng),
             dweight_before = random_floats(channels, rng);
  const auto dbias_before = random_floats(channels, rng);
  auto dinp = dinp_before, dweight = dweight_before, dbias = dbias_before;
  layernorm_backward(dinp.data(), dweight.data(), dbias.data(), probe.data(), inp.data(),
                     weight.data(), mean.data(), rstd.data(), rows, channels);

  auto inp_d = to_double(inp), weight_d = to_double(weight), bias_d = to_double(bias);
  const auto probe_d = to_double(probe);
  const auto objective = [&] {
    return dot(probe_d, layernorm_reference(inp_d, weight_d, bias_d, rows, channels).out);
  };
  expect_close(accumulated(dinp, dinp_before), finite_difference_gradient(inp_d, objective), 1e-3,
               1e-5, "dinp");
  expect_close(accumulated(dweight, dweight_before),
               finite_difference_gradient(weight_d, objective), 1e-4, 1e-5, "dweight");
  expect_close(accumulated(dbias, dbias_before), finite_difference_gradient(bias_d, objective),
               1e-4, 1e-5, "dbias");
}

}  // namespace
}  // namespace zerolens::kernels
