#include "kernels/matmul.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "kernel_test_support.hpp"

namespace zerolens::kernels {
namespace {

using namespace zerolens::kernels::testing;  // kernel_test_support.hpp

// out[r, o] = sum_c inp[r, c] * weight[o, c] + bias[o], naive float64 loops.
std::vector<double> matmul_reference(const std::vector<double>& inp,
                                     const std::vector<double>& weight,
                                     const std::vector<double>* bias, std::size_t rows,
                                     std::size_t in_channels, std::size_t out_channels) {
  std::vector<double> out(rows * out_channels);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t o = 0; o < out_channels; ++o) {
      double sum = bias != nullptr ? (*bias)[o] : 0.0;
      for (std::size_t c = 0; c < in_channels; ++c)
        sum += inp[r * in_channels + c] * weight[o * in_channels + c];
      out[r * out_channels + o] = sum;
    }
  return out;
}

TEST(Matmul, ForwardMatchesFloat64ReferenceWithAndWithoutBias) {
  std::mt19937 rng(1);
  // Odd sizes, larger than BLAS blocking, so edge handling is exercised.
  const std::size_t rows = 37, in_channels = 129, out_channels = 65;
  const auto inp = random_floats(rows * in_channels, rng),
             weight = random_floats(out_channels * in_channels, rng);
  const auto bias = random_floats(out_channels, rng);
  const auto inp_d = to_double(inp), weight_d = to_double(weight), bias_d = to_double(bias);

  std::vector<float> out(rows * out_channels, 123.0f);  // garbage: forward must overwrite
  matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), rows, in_channels,
                 out_channels);
  expect_close(out, matmul_reference(inp_d, weight_d, &bias_d, rows, in_channels, out_channels),
               1e-5, 1e-5, "with bias");

  std::fill(out.begin(), out.end(), 123.0f);
  matmul_forward(out.data(), inp.data(), weight.data(), nullptr, rows, in_channels, out_channels);
  expect_close(out, matmul_reference(inp_d, weight_d, nullptr, rows, in_channels, out_channels),
               1e-5, 1e-5, "without bias");
}

TEST(Matmul, BackwardMatchesFiniteDifferencesAndAccumulates) {
  std::mt19937 rng(2);
  const std::size_t rows = 6, in_channels = 5, out_channels = 7;
  const auto inp = random_floats(rows * in_channels, rng),
             weight = random_floats(out_channels * in_channels, rng);
  const auto bias = random_floats(out_channels, rng);
  // Objective: a random linear functional L = sum(probe * out), so dout = probe.
  const auto probe = random_floats(rows * out_channels, rng);

  // Gradient buffers start non-zero: the kernel must add, not overwrite.
  const auto dinp_before = random_floats(inp.size(), rng),
             dweight_before = random_floats(weight.size(), rng);
  const auto dbias_before = random_floats(bias.size(), rng);
  auto dinp = dinp_before, dweight = dweight_before, dbias = dbias_before;
  matmul_backward(dinp.data(), dweight.data(), dbias.data(), probe.data(), inp.data(),
                  weight.data(), rows, in_channels, out_channels);

  auto inp_d = to_double(inp), weight_d = to_double(weight), bias_d = to_double(bias);
  const auto probe_d = to_double(probe);
  const auto objective = [&] {
    return dot(probe_d,
               matmul_reference(inp_d, weight_d, &bias_d, rows, in_channels, out_channels));
  };
  expect_close(accumulated(dinp, dinp_before), finite_difference_gradient(inp_d, objective), 1e-4,
               1e-5, "dinp");
  expect_close(accumulated(dweight, dweight_before),
               finite_difference_gradient(weight_d, objective), 1e-4, 1e-5, "dweight");
  expect_close(accumulated(dbias, dbias_before), finite_difference_gradient(bias_d, objective),
               1e-4, 1e-5, "dbias");
}

TEST(Matmul, BackwardOnLargeShapeMatchesFloat64FormulasAndSkipsNullGradients) {
  std::mt19937 rng(3);
  const std::size_t rows = 33, in_channels = 70, out_channels = 41;
  const auto inp = random_floats(rows * in_channels, rng),
             weight = random_floats(out_channels * in_channels, rng);
  const auto dout = random_floats(rows * out_channels, rng);
  // No dinp and no dbias wanted (a first layer without bias): only dweight is written.
  std::vector<float> dweight(weight.size(), 0.0f);
  matmul_backward(nullptr, dweight.data(), nullptr, dout.data(), inp.data(), weight.data(), rows,
                  in_channels, out_channels);
  std::vector<double> expected(weight.size(), 0.0);
  for (std::size_t o = 0; o < out_channels; ++o)
    for (std::size_t c = 0; c < in_channels; ++c)
      for (std::size_t r = 0; r < rows; ++r)
        expected[o * in_channels + c] +=
            double(dout[r * out_channels + o]) * double(inp[r * in_channels + c]);
  expect_close(dweight, expected, 1e-5, 1e-5, "dweight");
}

TEST(Matmul, BiasGradientIsColumnSumOnThreadedShape) {
  std::mt19937 rng(4);
  // rows * out_channels above the kernel's threading threshold.
  const std::size_t rows = 600, in_channels = 3, out_channels = 130;
  const auto inp = random_floats(rows * in_channels, rng),
             weight = random_floats(out_channels * in_channels, rng);
  const auto dout = random_floats(rows * out_channels, rng);
  std::vector<float> dinp(inp.size(), 0.0f), dweight(weight.size(), 0.0f),
      dbias(out_channels, 0.5f);
  matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                  rows, in_channels, out_channels);
  std::vector<double> expected(out_channels, 0.5);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t o = 0; o < out_channels; ++o)
      expected[o] += double(dout[r * out_channels + o]);
  expect_close(dbias, expected, 1e-5, 1e-4, "dbias");
}

// Megatron's row-parallel layer: the bias added after the product (bias_forward) gives the fused
// product-with-bias, and bias_backward the column sums matmul_backward gives the bias.
TEST(Matmul, BiasAddedAfterTheProductIsTheFusedLayer) {
  std::mt19937 rng(5);
  const std::size_t rows = 7, in_channels = 5, out_channels = 6;
  const auto inp = random_floats(rows * in_channels, rng),
             weight = random_floats(out_channels * in_channels, rng),
             bias = random_floats(out_channels, rng),
             dout = random_floats(rows * out_channels, rng);
  std::vector<float> fused(rows * out_channels), apart(rows * out_channels);
  matmul_forward(fused.data(), inp.data(), weight.data(), bias.data(), rows, in_channels,
                 out_channels);
  matmul_forward(apart.data(), inp.data(), weight.data(), nullptr, rows, in_channels, out_channels);
  bias_forward(apart.data(), bias.data(), rows, out_channels);
  for (std::size_t i = 0; i < fused.size(); ++i) EXPECT_NEAR(apart[i], fused[i], 1e-6) << i;
  std::vector<float> dinp(inp.size(), 0.0f), dweight(weight.size(), 0.0f),
      dbias(out_channels, 0.25f), dbias_apart(out_channels, 0.25f);
  matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                  rows, in_channels, out_channels);
  bias_backward(dbias_apart.data(), dout.data(), rows, out_channels);
  EXPECT_EQ(dbias_apart, dbias);
}

}  // namespace
}  // namespace zerolens::kernels
