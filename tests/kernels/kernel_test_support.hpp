#pragma once
// Shared helpers of the kernel tests: random data, float64 conversions, central finite differences
// and tolerance checks that name the worst element.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace zerolens::kernels::testing {

inline std::vector<float> random_floats(std::size_t count, std::mt19937& rng, float low = -1.0f,
                                        float high = 1.0f) {
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(count);
  for (float& value : values) value = distribution(rng);
  return values;
}

inline std::vector<double> to_double(const std::vector<float>& values) {
  return std::vector<double>(values.begin(), values.end());
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

// d objective / d x[i] by central differences in float64, for every i in `indices` (all when
// empty). `objective` reads `x`, which is perturbed in place and restored.
inline std::vector<double> finite_difference_gradient(std::vector<double>& x,
                                                      const std::function<double()>& objective,
                                                      std::vector<std::size_t> indices = {},
                                                      double step = 1e-6) {
  if (indices.empty())
    for (std::size_t i = 0; i < x.size(); ++i) indices.push_back(i);
  std::vector<double> gradient(indices.size());
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const std::size_t i = indices[k];
    const double saved = x[i];
    x[i] = saved + step;
    const double plus = objective();
    x[i] = saved - step;
    const double minus = objective();
    x[i] = saved;
    gradient[k] = (plus - minus) / (2.0 * step);
  }
  return gradient;
}

// `count` distinct-enough random indices below `size` (for finite differences on large tensors).
inline std::vector<std::size_t> random_indices(std::size_t size, std::size_t count,
                                               std::mt19937& rng) {
  std::uniform_int_distribution<std::size_t> distribution(0, size - 1);
  std::vector<std::size_t> indices(count);
  for (std::size_t& index : indices) index = distribution(rng);
  return indices;
}

// |actual - expected| <= atol + rtol * |expected| element-wise; on failure reports the worst
// element.
inline void expect_close(const std::vector<float>& actual, const std::vector<double>& expected,
                         double rtol, double atol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  std::size_t worst = 0;
  double worst_excess = -1.0;
  std::size_t failures = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double error = std::abs(double(actual[i]) - expected[i]);
    const double allowed = atol + rtol * std::abs(expected[i]);
    const double excess = std::isnan(error) ? 1e300 : error - allowed;
    if (excess > 0) ++failures;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  EXPECT_EQ(failures, 0u) << what << ": worst element " << worst << " actual " << actual[worst]
                          << " expected " << expected[worst];
}

// Picks the elements `indices` of `values` (to compare a kernel's gradient with a sampled one).
inline std::vector<float> gather(const std::vector<float>& values,
                                 const std::vector<std::size_t>& indices) {
  std::vector<float> picked;
  for (std::size_t index : indices) picked.push_back(values[index]);
  return picked;
}

// after - before, element-wise: what a backward kernel accumulated onto a non-zero buffer.
inline std::vector<float> accumulated(const std::vector<float>& after,
                                      const std::vector<float>& before) {
  std::vector<float> difference(after.size());
  for (std::size_t i = 0; i < after.size(); ++i) difference[i] = after[i] - before[i];
  return difference;
}

}  // namespace zerolens::kernels::testing
