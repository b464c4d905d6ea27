#include "kernels/moe.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernel_test_support.hpp"

namespace zerolens::kernels {
namespace {

using namespace zerolens::kernels::testing;  // kernel_test_support.hpp

// Four tokens, three experts, top-2, capacity 2, worked by hand. Token 0 prefers experts 0 then 1,
// token 1 experts 0 then 2, token 2 experts 0 then 1, token 3 experts 2 then 1. In token order
// expert 0 fills its 2 slots with tokens 0 and 1, so token 2's first choice is dropped and its
// gate goes whole to expert 1 (renormalised over the routes kept, as DeepSpeed's gates_masked).
TEST(MoeRoute, SlotsInTokenOrderAndGatesOverTheKeptRoutes) {
  const float logits[] = {2, 1, 0,  //
                          2, 0, 1,  //
                          2, 1, 0,  //
                          0, 1, 2};
  const MoeRoutes r = moe_route(logits, 4, 3, 2, 2);
  EXPECT_EQ(r.expert, (std::vector<std::int32_t>{0, 1, 0, 2, 0, 1, 2, 1}));
  EXPECT_EQ(r.slot, (std::vector<std::int32_t>{0, 0, 1, 0, -1, 1, 1, -1}));
  // softmax(2, 1, 0) = (0.665, 0.245, 0.090): token 0's gates 0.665 / 0.910 and 0.245 / 0.910.
  const double e2 = std::exp(2.0), e1 = std::exp(1.0), sum = e2 + e1 + 1;
  EXPECT_NEAR(r.gate[0], e2 / (e2 + e1), 1e-6);
  EXPECT_NEAR(r.gate[1], e1 / (e2 + e1), 1e-6);
  EXPECT_NEAR(r.probs[0], e2 / sum, 1e-6);
  EXPECT_EQ(r.gate[4], 0.0f);  // token 2's dropped route
  EXPECT_NEAR(r.gate[5], 1.0, 1e-6);
  // Token 3's second choice, expert 1, is its third token: past the capacity, dropped.
  EXPECT_EQ(r.gate[7], 0.0f);
  EXPECT_NEAR(r.gate[6], 1.0, 1e-6);
}

// A float64 reference of the whole MoE MLP with linear experts (expert e maps a row x to x W_e):
// out[t] = sum over t's kept routes of gate x (x[t] W_e), routes from `routes` (fixed: the
// discrete choices do not move under small perturbations away from ties).
std::vector<double> moe_reference(const std::vector<double>& x, const std::vector<double>& logits,
                                  const std::vector<double>& weights, const MoeRoutes& routes,
                                  std::size_t channels) {
  std::vector<double> out(routes.tokens * channels, 0.0);
  for (std::size_t t = 0; t < routes.tokens; ++t) {
    std::vector<double> p(routes.experts);
    double sum = 0;
    for (std::size_t e = 0; e < routes.experts; ++e)
      sum += p[e] = std::exp(logits[t * routes.experts + e]);
    for (double& value : p) value /= sum;
    double kept = 0;
    for (std::size_t j = 0; j < routes.top_k; ++j)
      if (routes.slot[t * routes.top_k + j] >= 0)
        kept += p[std::size_t(routes.expert[t * routes.top_k + j])];
    for (std::size_t j = 0; j < routes.top_k; ++j) {
      const std::size_t at = t * routes.top_k + j;
      if (routes.slot[at] < 0) continue;
      const std::size_t e = std::size_t(routes.expert[at]);
      const double gate = p[e] / kept;
      for (std::size_t o = 0; o < channels; ++o) {
        double y = 0;
        for (std::size_t i = 0; i < channels; ++i)
          y += x[t * channels + i] * weights[(e * channels + i) * channels + o];
        out[t * channels + o] += gate * y;
      }
    }
  }
  return out;
}

// dispatch, linear experts on the buffer, combine; then backward through combine, the experts,
// dispatch and the gates, against central differences of the float64 reference. Capacity 3 of 8
// tokens x top-2 over 4 experts drops some routes.
TEST(MoeRoute, BackwardMatchesFiniteDifferencesOfTheFloat64Reference) {
  std::mt19937 rng(7);
  const std::size_t tokens = 8, experts = 4, top_k = 2, channels = 3, capacity = 3;
  const auto x = random_floats(tokens * channels, rng);
  const auto logits = random_floats(tokens * experts, rng, -2.0f, 2.0f);
  const auto weights = random_floats(experts * channels * channels, rng);
  const auto probe = random_floats(tokens * channels, rng);
  const MoeRoutes routes = moe_route(logits.data(), tokens, experts, top_k, capacity);
  std::size_t dropped = 0;
  for (const auto slot : routes.slot) dropped += slot < 0 ? 1 : 0;
  EXPECT_GT(dropped, 0u);
  // Forward with the kernels.
  std::vector<float> buffer(experts * capacity * channels), expert_out(buffer.size()),
      out(tokens * channels);
  moe_dispatch(buffer.data(), x.data(), routes, channels);
  for (std::size_t e = 0; e < experts; ++e)
    for (std::size_t c = 0; c < capacity; ++c)
      for (std::size_t o = 0; o < channels; ++o) {
        double y = 0;
        for (std::size_t i = 0; i < channels; ++i)
          y += double(buffer[(e * capacity + c) * channels + i]) *
               double(weights[(e * channels + i) * channels + o]);
        expert_out[(e * capacity + c) * channels + o] = float(y);
      }
  moe_combine(out.data(), expert_out.data(), routes, channels);
  auto x_d = to_double(x), logits_d = to_double(logits);
  const auto weights_d = to_double(weights), probe_d = to_double(probe);
  expect_close(out, moe_reference(x_d, logits_d, weights_d, routes, channels), 1e-5, 1e-6,
               "forward");
  // Backward.
  std::vector<float> dbuffer(buffer.size(), 0.0f), dgate(tokens * top_k, 0.0f);
  moe_combine_backward(dbuffer.data(), dgate.data(), probe.data(), expert_out.data(), routes,
                       channels);
  std::vector<float> dexpert_in(buffer.size(), 0.0f);
  for (std::size_t e = 0; e < experts; ++e)
    for (std::size_t c = 0; c < capacity; ++c)
      for (std::size_t i = 0; i < channels; ++i) {
        double d = 0;
        for (std::size_t o = 0; o < channels; ++o)
          d += double(dbuffer[(e * capacity + c) * channels + o]) *
               double(weights[(e * channels + i) * channels + o]);
        dexpert_in[(e * capacity + c) * channels + i] = float(d);
      }
  const auto dx_before = random_floats(x.size(), rng),
             dlogits_before = random_floats(logits.size(), rng);
  auto dx = dx_before, dlogits = dlogits_before;
  moe_dispatch_backward(dx.data(), dexpert_in.data(), routes, channels);
  moe_route_backward(dlogits.data(), dgate.data(), routes);
  const auto objective = [&] {
    return dot(probe_d, moe_reference(x_d, logits_d, weights_d, routes, channels));
  };
  expect_close(accumulated(dx, dx_before), finite_difference_gradient(x_d, objective), 1e-4, 1e-5,
               "dx");
  expect_close(accumulated(dlogits, dlogits_before),
               finite_difference_gradient(logits_d, objective), 1e-4, 1e-5, "dlogits");
}

}  // namespace
}  // namespace zerolens::kernels
