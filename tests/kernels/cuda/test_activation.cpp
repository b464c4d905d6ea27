// GELU and residual against float64 loops.
#include "kernels/cuda/activation.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda_test_support.hpp"

namespace zerolens::kernels::cuda {
namespace {

using namespace zerolens::kernels::cuda::testing;  // cuda_test_support.hpp
using CudaActivation = CudaTest;

const double sqrt_2_over_pi = std::sqrt(2.0 / std::acos(-1.0));

double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(sqrt_2_over_pi * (x + 0.044715 * x * x * x)));
}
double gelu_derivative(double x) {
  const double t = std::tanh(sqrt_2_over_pi * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) +
         0.5 * x * (1.0 - t * t) * sqrt_2_over_pi * (1.0 + 3.0 * 0.044715 * x * x);
}

TEST_F(CudaActivation, GeluForwardAndBackwardMatchFloat64) {
  std::mt19937 rng(21);
  const std::size_t count = 100003;
  const std::vector<float> inp = random_floats(count, rng, -6.0f, 6.0f),
                           dout = random_floats(count, rng), dinp0 = random_floats(count, rng);
  const auto d_inp = to_device(inp), d_dout = to_device(dout);
  DeviceBuffer<float> out(count);
  auto dinp = to_device(dinp0), grad = to_device(dout);
  gelu_forward(out.data(), d_inp.data(), count, nullptr);
  gelu_backward(dinp.data(), d_inp.data(), d_dout.data(), count, nullptr);
  gelu_backward_inplace(grad.data(), d_inp.data(), count, nullptr);
  std::vector<double> expected_out(count), expected_dinp(count), expected_grad(count);
  for (std::size_t i = 0; i < count; ++i) {
    expected_out[i] = gelu(inp[i]);
    expected_grad[i] = gelu_derivative(inp[i]) * dout[i];
    expected_dinp[i] = dinp0[i] + expected_grad[i];
  }
  expect_close(out.download(), expected_out, 1e-5, 1e-6, "gelu");
  expect_close(dinp.download(), expected_dinp, 1e-5, 1e-6, "dinp (accumulated)");
  expect_close(grad.download(), expected_grad, 1e-5, 1e-6, "in-place gradient");
}

TEST_F(CudaActivation, ResidualAddsAndItsBackwardAccumulatesIntoBothBranches) {
  std::mt19937 rng(22);
  const std::size_t count = 4099;
  const std::vector<float> a = random_floats(count, rng), b = random_floats(count, rng),
                           dout = random_floats(count, rng), da0 = random_floats(count, rng),
                           db0 = random_floats(count, rng);
  auto d_a = to_device(a), d_b = to_device(b), d_dout = to_device(dout), da = to_device(da0),
       db = to_device(db0);
  DeviceBuffer<float> out(count);
  residual_forward(out.data(), d_a.data(), d_b.data(), count, nullptr);
  residual_backward(da.data(), db.data(), d_dout.data(), count, nullptr);
  residual_forward(d_a.data(), d_a.data(), d_b.data(), count, nullptr);  // out aliasing inp1
  const std::vector<float> sum = out.download(), aliased = d_a.download(), grad_a = da.download(),
                           grad_b = db.download();
  for (std::size_t i = 0; i < count; ++i) {  // one float add each: exact comparisons
    ASSERT_EQ(sum[i], a[i] + b[i]) << i;
    ASSERT_EQ(aliased[i], a[i] + b[i]) << i;
    ASSERT_EQ(grad_a[i], da0[i] + dout[i]) << i;
    ASSERT_EQ(grad_b[i], db0[i] + dout[i]) << i;
  }
}

}  // namespace
}  // namespace zerolens::kernels::cuda
