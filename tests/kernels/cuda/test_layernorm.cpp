// LayerNorm forward and backward against float64 loops.
#include "kernels/cuda/layernorm.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda_test_support.hpp"

namespace zerolens::kernels::cuda {
namespace {

using namespace zerolens::kernels::cuda::testing;  // cuda_test_support.hpp
using CudaLayerNorm = CudaTest;

constexpr std::size_t rows = 37, channels = 771;  // channels not a multiple of the warp

// Inputs with a large common offset, as in the CPU test: a one-pass variance would lose digits.
std::vector<float> offset_inputs(std::mt19937& rng) {
  std::vector<float> values = random_floats(rows * channels, rng);
  for (float& value : values) value += 30.0f;
  return values;
}

struct Statistics {
  std::vector<double> mean, rstd;
};

Statistics statistics(const std::vector<double>& x) {
  Statistics s{std::vector<double>(rows), std::vector<double>(rows)};
  for (std::size_t r = 0; r < rows; ++r) {
    double mean = 0.0, variance = 0.0;
    for (std::size_t c = 0; c < channels; ++c) mean += x[r * channels + c];
    mean /= double(channels);
    for (std::size_t c = 0; c < channels; ++c) variance += std::pow(x[r * channels + c] - mean, 2);
    s.mean[r] = mean;
    s.rstd[r] = 1.0 / std::sqrt(variance / double(channels) + 1e-5);
  }
  return s;
}

TEST_F(CudaLayerNorm, ForwardMatchesFloat64AndSavesStatistics) {
  std::mt19937 rng(11);
  const std::vector<float> inp = offset_inputs(rng),
                           weight = random_floats(channels, rng, 0.5f, 1.5f),
                           bias = random_floats(channels, rng);
  const auto d_inp = to_device(inp), d_weight = to_device(weight), d_bias = to_device(bias);
  DeviceBuffer<float> out(inp.size()), mean(rows), rstd(rows);
  layernorm_forward(out.data(), mean.data(), rstd.data(), d_inp.data(), d_weight.data(),
                    d_bias.data(), rows, channels, nullptr);
  const std::vector<double> x = to_double(inp);
  const Statistics s = statistics(x);
  std::vector<double> expected(inp.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < channels; ++c)
      expected[r * channels + c] =
          (x[r * channels + c] - s.mean[r]) * s.rstd[r] * weight[c] + bias[c];
  expect_close(out.download(), expected, 1e-4, 1e-4, "out");
  expect_close(mean.download(), s.mean, 1e-6, 1e-6, "mean");
  expect_close(rstd.download(), s.rstd, 1e-4, 1e-6, "rstd");
}

TEST_F(CudaLayerNorm, BackwardMatchesFloat64AndAccumulates) {
  std::mt19937 rng(12);
  const std::vector<float> inp = offset_inputs(rng),
                           weight = random_floats(channels, rng, 0.5f, 1.5f),
                           dout = random_floats(rows * channels, rng);
  const std::vector<double> x = to_double(inp);
  const Statistics s = statistics(x);
  const std::vector<float> mean(s.mean.begin(), s.mean.end()), rstd(s.rstd.begin(), s.rstd.end());
  // Non-zero starting gradients: the kernel must add, not overwrite.
  const std::vector<float> dinp0 = random_floats(inp.size(), rng),
                           dweight0 = random_floats(channels, rng),
                           dbias0 = random_floats(channels, rng);
  auto dinp = to_device(dinp0), dweight = to_device(dweight0), dbias = to_device(dbias0);
  const auto d_inp = to_device(inp), d_weight = to_device(weight), d_dout = to_device(dout),
             d_mean = to_device(mean), d_rstd = to_device(rstd);
  layernorm_backward(dinp.data(), dweight.data(), dbias.data(), d_dout.data(), d_inp.data(),
                     d_weight.data(), d_mean.data(), d_rstd.data(), rows, channels, nullptr);

  // The analytic gradient in float64: dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm *
  // norm)).
  std::vector<double> expected_dinp(inp.size()), expected_dweight(channels, 0.0),
      expected_dbias(channels, 0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    double dnorm_mean = 0.0, dnorm_norm_mean = 0.0;
    for (std::size_t c = 0; c < channels; ++c) {
      const std::size_t i = r * channels + c;
      const double norm = (x[i] - mean[r]) * double(rstd[r]), dnorm = double(weight[c]) * dout[i];
      dnorm_mean += dnorm / double(channels);
      dnorm_norm_mean += dnorm * norm / double(channels);
      expected_dweight[c] += double(dout[i]) * norm;
      expected_dbias[c] += dout[i];
    }
    for (std::size_t c = 0; c < channels; ++c) {
      const std::size_t i = r * channels + c;
      const double norm = (x[i] - mean[r]) * double(rstd[r]);
      expected_dinp[i] = dinp0[i] + double(rstd[r]) * (double(weight[c]) * dout[i] - dnorm_mean -
                                                       norm * dnorm_norm_mean);
    }
  }
  for (std::size_t c = 0; c < channels; ++c) {
    expected_dweight[c] += dweight0[c];
    expected_dbias[c] += dbias0[c];
  }
  expect_close(dinp.download(), expected_dinp, 1e-3, 1e-4, "dinp");
  expect_close(dweight.download(), expected_dweight, 1e-4, 1e-4, "dweight");
  expect_close(dbias.download(), expected_dbias, 1e-5, 1e-5, "dbias");
}

}  // namespace
}  // namespace zerolens::kernels::cuda
