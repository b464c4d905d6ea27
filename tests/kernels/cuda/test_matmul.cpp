// The cuBLAS fully connected layer against float64 loops (fp32 and bf16).
#include "kernels/cuda/matmul.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "cuda_test_support.hpp"
#include "kernels/precision.hpp"

namespace zerolens::kernels::cuda {
namespace {

using namespace zerolens::kernels::cuda::testing;  // cuda_test_support.hpp
using CudaMatmul = CudaTest;

constexpr std::size_t rows = 67, in = 129, out = 95;  // odd sizes: no tile divides them

// out[r, o] = bias[o] + sum_i inp[r, i] * weight[o, i] in float64.
std::vector<double> forward_reference(const std::vector<float>& inp,
                                      const std::vector<float>& weight,
                                      const std::vector<float>* bias, std::size_t n_rows = rows,
                                      std::size_t n_in = in, std::size_t n_out = out) {
  std::vector<double> result(n_rows * n_out);
  for (std::size_t r = 0; r < n_rows; ++r)
    for (std::size_t o = 0; o < n_out; ++o) {
      double sum = bias ? double((*bias)[o]) : 0.0;
      for (std::size_t i = 0; i < n_in; ++i)
        sum += double(inp[r * n_in + i]) * weight[o * n_in + i];
      result[r * n_out + o] = sum;
    }
  return result;
}

TEST_F(CudaMatmul, ForwardMatchesFloat64WithAndWithoutBias) {
  std::mt19937 rng(51);
  const std::vector<float> inp = random_floats(rows * in, rng),
                           weight = random_floats(out * in, rng), bias = random_floats(out, rng);
  const auto d_inp = to_device(inp), d_weight = to_device(weight), d_bias = to_device(bias);
  DeviceBuffer<float> result(rows * out);
  BlasHandles handles;
  matmul_forward(result.data(), d_inp.data(), d_weight.data(), d_bias.data(), rows, in, out,
                 handles, nullptr);
  expect_close(result.download(), forward_reference(inp, weight, &bias), 1e-4, 1e-5, "with bias");
  matmul_forward(result.data(), d_inp.data(), d_weight.data(), nullptr, rows, in, out, handles,
                 nullptr);
  expect_close(result.download(), forward_reference(inp, weight, nullptr), 1e-4, 1e-5,
               "without bias");
  // The benchmark's alternatives: every candidate the heuristic offers computes the same product.
  const int candidates = matmul_forward_algorithms(rows, in, out, true, handles, 8);
  ASSERT_GE(candidates, 1);
  for (int algorithm = 1; algorithm < candidates; ++algorithm) {
    matmul_forward(result.data(), d_inp.data(), d_weight.data(), d_bias.data(), rows, in, out,
                   handles, nullptr, algorithm);
    expect_close(result.download(), forward_reference(inp, weight, &bias), 1e-4, 1e-5,
                 "algorithm " + std::to_string(algorithm));
  }
  EXPECT_THROW(matmul_forward(result.data(), d_inp.data(), d_weight.data(), d_bias.data(), rows, in,
                              out, handles, nullptr, 1000),
               std::out_of_range);
  EXPECT_GT(handles.workspace_bytes(), 0u);
}

TEST_F(CudaMatmul, BackwardMatchesFloat64AndAccumulates) {
  std::mt19937 rng(52);
  const std::vector<float> inp = random_floats(rows * in, rng),
                           weight = random_floats(out * in, rng),
                           dout = random_floats(rows * out, rng),
                           dinp0 = random_floats(rows * in, rng),
                           dweight0 = random_floats(out * in, rng),
                           dbias0 = random_floats(out, rng);
  std::vector<double> dinp(dinp0.begin(), dinp0.end()), dweight(dweight0.begin(), dweight0.end()),
      dbias(dbias0.begin(), dbias0.end());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t o = 0; o < out; ++o) {
      const double d = dout[r * out + o];
      dbias[o] += d;
      for (std::size_t i = 0; i < in; ++i) {
        dinp[r * in + i] += d * weight[o * in + i];
        dweight[o * in + i] += d * inp[r * in + i];
      }
    }
  const auto d_inp = to_device(inp), d_weight = to_device(weight), d_dout = to_device(dout);
  auto d_dinp = to_device(dinp0), d_dweight = to_device(dweight0), d_dbias = to_device(dbias0);
  BlasHandles handles;
  matmul_backward(d_dinp.data(), d_dweight.data(), d_dbias.data(), d_dout.data(), d_inp.data(),
                  d_weight.data(), rows, in, out, handles, nullptr);
  expect_close(d_dinp.download(), dinp, 1e-4, 1e-5, "dinp");
  expect_close(d_dweight.download(), dweight, 1e-4, 1e-5, "dweight");
  expect_close(d_dbias.download(), dbias, 1e-5, 1e-5, "dbias");
  // Without dinp and dbias (first layer, no bias): dweight accumulates once more, the rest is kept.
  d_dbias.upload(dbias0);
  matmul_backward(nullptr, d_dweight.data(), nullptr, d_dout.data(), d_inp.data(), d_weight.data(),
                  rows, in, out, handles, nullptr);
  for (std::size_t i = 0; i < dweight.size(); ++i) dweight[i] += dweight[i] - dweight0[i];
  expect_close(d_dweight.download(), dweight, 1e-4, 1e-5, "dweight twice");
  EXPECT_EQ(d_dbias.download(), dbias0);
}

TEST_F(CudaMatmul, Bf16ForwardMatchesFloat64RoundedToBf16) {
  std::mt19937 rng(53);
  // 16-bit GEMMs want leading dimensions in multiples of 8 elements (16 bytes), as models have.
  constexpr std::size_t bf16_in = 128, bf16_out = 96;
  std::vector<std::uint16_t> inp(rows * bf16_in), weight(bf16_out * bf16_in), bias(bf16_out);
  std::vector<float> inp32(inp.size()), weight32(weight.size()), bias32(bias.size());
  for (auto [bits, floats] :
       {std::pair{&inp, &inp32}, std::pair{&weight, &weight32}, std::pair{&bias, &bias32}}) {
    const std::vector<float> values = random_floats(bits->size(), rng);
    for (std::size_t i = 0; i < values.size(); ++i) {
      (*bits)[i] = fp32_to_bf16(values[i]);
      (*floats)[i] = bf16_to_fp32((*bits)[i]);  // the reference sees exactly the bf16 inputs
    }
  }
  const auto d_inp = to_device(inp), d_weight = to_device(weight), d_bias = to_device(bias);
  DeviceBuffer<std::uint16_t> result(rows * bf16_out);
  BlasHandles handles;
  matmul_forward_bf16(result.data(), d_inp.data(), d_weight.data(), d_bias.data(), rows, bf16_in,
                      bf16_out, handles, nullptr);
  const std::vector<double> exact =
      forward_reference(inp32, weight32, &bias32, rows, bf16_in, bf16_out);
  const std::vector<std::uint16_t> gpu = result.download();
  // fp32 accumulation in another order may land on the other side of a bf16 rounding boundary:
  // allow one bf16 step (2^-7 relative at worst) from the float64 value rounded to bf16.
  std::size_t failures = 0;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    const double rounded = bf16_to_fp32(fp32_to_bf16(float(exact[i])));
    if (std::abs(bf16_to_fp32(gpu[i]) - rounded) > 1e-4 + std::ldexp(std::abs(rounded), -7))
      ++failures;
  }
  EXPECT_EQ(failures, 0u);
}

}  // namespace
}  // namespace zerolens::kernels::cuda
