#include "kernels/optimizer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "kernel_test_support.hpp"

namespace zerolens::kernels {
namespace {

using namespace zerolens::kernels::testing;  // kernel_test_support.hpp

TEST(AdamW, FirstStepHandWorked) {
  // Step 1 from m = v = 0: m = (1 - b1) g, v = (1 - b2) g^2, so the bias-corrected m_hat = g and
  // v_hat = g^2, and the Adam update is g / (|g| + eps) ~ sign(g). AdamW then subtracts
  // lr * (update + decay * param):
  //   p = 1,  g = 0.5: m = 0.05, v = 0.00025, update = 0.5 / (0.5 + 1e-8) = 0.99999998,
  //                    p' = 1 - 0.1 * (0.99999998 + 0.01 * 1) = 0.899000002
  //   p = -3, g = -2:  m = -0.2, v = 0.004, update = -2 / (2 + 1e-8) = -0.999999995,
  //                    p' = -3 - 0.1 * (-0.999999995 + 0.01 * -3) = -2.8969999995
  const AdamConfig config{.lr = 0.1,
                          .beta1 = 0.9,
                          .beta2 = 0.999,
                          .eps = 1e-8,
                          .weight_decay = 0.01,
                          .adam_w_mode = true};
  float params[] = {1.0f, -3.0f};
  const float grads[] = {0.5f, -2.0f};
  float m[] = {0.0f, 0.0f}, v[] = {0.0f, 0.0f};
  adam_step(params, grads, m, v, 2, config, 1);
  EXPECT_NEAR(params[0], 0.899000002f, 1e-6f);
  EXPECT_NEAR(params[1], -2.8969999995f, 1e-6f);
  EXPECT_NEAR(m[0], 0.05f, 1e-8f);
  EXPECT_NEAR(v[0], 0.00025f, 1e-10f);
  EXPECT_NEAR(m[1], -0.2f, 1e-7f);
  EXPECT_NEAR(v[1], 0.004f, 1e-9f);
}

TEST(Adam, L2DecayEntersTheGradientNotTheUpdate) {
  // p = -1, g = 0.001, decay 0.1, lr 0.1, step 1.
  // Adam (L2): g' = 0.001 + 0.1 * -1 = -0.099, m = -0.0099, update = g'/(|g'| + eps) ~ -1, so
  //   p' = -1 - 0.1 * -0.9999999 = -0.90000001: the decay flipped the direction of the step.
  // AdamW: update = 0.001 / (0.001 + 1e-8) = 0.99999, p' = -1 - 0.1 * (0.99999 + 0.1 * -1) =
  // -1.089999.
  AdamConfig config{.lr = 0.1,
                    .beta1 = 0.9,
                    .beta2 = 0.999,
                    .eps = 1e-8,
                    .weight_decay = 0.1,
                    .adam_w_mode = false};
  const float grads[] = {0.001f};
  float params[] = {-1.0f}, m[] = {0.0f}, v[] = {0.0f};
  adam_step(params, grads, m, v, 1, config, 1);
  EXPECT_NEAR(params[0], -0.90000001f, 1e-6f);
  EXPECT_NEAR(m[0], -0.0099f, 1e-8f);

  config.adam_w_mode = true;
  float params_w[] = {-1.0f}, m_w[] = {0.0f}, v_w[] = {0.0f};
  adam_step(params_w, grads, m_w, v_w, 1, config, 1);
  EXPECT_NEAR(params_w[0], -1.089999f, 1e-6f);
  EXPECT_NEAR(m_w[0], 0.0001f, 1e-9f);
}

struct AdamState {
  std::vector<double> params, m, v;
};

// Float64 Adam/AdamW written as PyTorch documents it (AdamW shrinks the parameter first).
void adam_reference_step(AdamState& state, const std::vector<double>& grads,
                         const AdamConfig& config, int step) {
  const double correction1 = 1.0 - std::pow(config.beta1, step),
               correction2 = 1.0 - std::pow(config.beta2, step);
  for (std::size_t i = 0; i < state.params.size(); ++i) {
    double g = grads[i];
    if (config.adam_w_mode)
      state.params[i] *= 1.0 - config.lr * config.weight_decay;
    else
      g += config.weight_decay * state.params[i];
    state.m[i] = config.beta1 * state.m[i] + (1.0 - config.beta1) * g;
    state.v[i] = config.beta2 * state.v[i] + (1.0 - config.beta2) * g * g;
    const double denominator = std::sqrt(state.v[i] / correction2) + config.eps;
    state.params[i] -= config.lr * (state.m[i] / correction1) / denominator;
  }
}

TEST(Adam, BothModesMatchFloat64ReferenceOverTenSteps) {
  // beta2 0.95 (GPT training) and 0.999 (the default, inexact in float: 1 - beta2 must not lose
  // digits).
  for (const auto& [adam_w_mode, beta2] :
       {std::pair{true, 0.95}, {false, 0.95}, {true, 0.999}, {false, 0.999}}) {
    std::mt19937 rng(61);
    const std::size_t count = 1003;  // not a multiple of the vector width
    const AdamConfig config{.lr = 0.01,
                            .beta1 = 0.9,
                            .beta2 = beta2,
                            .eps = 1e-8,
                            .weight_decay = 0.1,
                            .adam_w_mode = adam_w_mode};
    auto params = random_floats(count, rng, -2.0f, 2.0f);
    std::vector<float> m(count, 0.0f), v(count, 0.0f);
    AdamState reference{to_double(params), std::vector<double>(count, 0.0),
                        std::vector<double>(count, 0.0)};
    for (int step = 1; step <= 10; ++step) {
      const auto grads = random_floats(count, rng, -1.0f, 1.0f);
      adam_step(params.data(), grads.data(), m.data(), v.data(), count, config, step);
      adam_reference_step(reference, to_double(grads), config, step);
    }
    const std::string mode =
        (adam_w_mode ? "AdamW beta2 " : "Adam beta2 ") + std::to_string(beta2) + " ";
    expect_close(params, reference.params, 1e-5, 1e-6, mode + "params");
    expect_close(m, reference.m, 1e-5, 1e-7, mode + "m");
    expect_close(v, reference.v, 1e-5, 1e-8, mode + "v");
  }
}

TEST(Adam, MultiThreadedEqualsSingleThreadedBitForBit) {
  for (const bool adam_w_mode : {true, false}) {
    std::mt19937 rng(62);
    const std::size_t count = 100003;
    const AdamConfig config{.lr = 1e-3, .weight_decay = 0.01, .adam_w_mode = adam_w_mode};
    const auto initial = random_floats(count, rng, -1.0f, 1.0f);
    std::vector<std::vector<float>> grads;
    for (int step = 0; step < 3; ++step) grads.push_back(random_floats(count, rng, -1.0f, 1.0f));
    const auto run = [&](int threads) {
      std::vector<float> params = initial, m(count, 0.0f), v(count, 0.0f);
      for (int step = 1; step <= 3; ++step)
        adam_step(params.data(), grads[std::size_t(step - 1)].data(), m.data(), v.data(), count,
                  config, step, threads);
      params.insert(params.end(), m.begin(), m.end());
      params.insert(params.end(), v.begin(), v.end());
      return params;
    };
    const auto single = run(1);
    for (const int threads : {2, 3, 0}) {
      const auto multi = run(threads);
      EXPECT_EQ(std::memcmp(single.data(), multi.data(), single.size() * sizeof(float)), 0)
          << (adam_w_mode ? "AdamW" : "Adam") << " with " << threads << " threads";
    }
  }
}

TEST(Adam, RejectsStepZero) {
  float params[] = {1.0f}, m[] = {0.0f}, v[] = {0.0f};
  const float grads[] = {1.0f};
  EXPECT_THROW(adam_step(params, grads, m, v, 1, AdamConfig{}, 0), std::invalid_argument);
}

TEST(Sgd, MomentumHandWorkedTwoSteps) {
  // lr 0.1, momentum 0.9, no decay, p = 1:
  //   step 1, g = 0.5:  buf = 0.5,                 p = 1 - 0.05 = 0.95
  //   step 2, g = -1:   buf = 0.9 * 0.5 - 1 = -0.55, p = 0.95 + 0.055 = 1.005
  const SgdConfig config{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.0};
  float params[] = {1.0f}, buffer[] = {0.0f};
  const float first[] = {0.5f}, second[] = {-1.0f};
  sgd_step(params, first, buffer, 1, config);
  EXPECT_NEAR(params[0], 0.95f, 1e-7f);
  EXPECT_NEAR(buffer[0], 0.5f, 1e-7f);
  sgd_step(params, second, buffer, 1, config);
  EXPECT_NEAR(params[0], 1.005f, 1e-6f);
  EXPECT_NEAR(buffer[0], -0.55f, 1e-7f);
}

TEST(Sgd, MatchesFloat64ReferenceWithAndWithoutMomentum) {
  for (const double momentum : {0.0, 0.9}) {
    std::mt19937 rng(63);
    const std::size_t count = 517;
    const SgdConfig config{.lr = 0.05, .momentum = momentum, .weight_decay = 0.01};
    auto params = random_floats(count, rng);
    std::vector<float> buffer(count, 0.0f);
    auto params_d = to_double(params);
    std::vector<double> buffer_d(count, 0.0);
    for (int step = 0; step < 8; ++step) {
      const auto grads = random_floats(count, rng);
      // No buffer at all is allowed without momentum.
      sgd_step(params.data(), grads.data(), momentum > 0 ? buffer.data() : nullptr, count, config);
      for (std::size_t i = 0; i < count; ++i) {
        const double g = double(grads[i]) + config.weight_decay * params_d[i];
        buffer_d[i] = momentum * buffer_d[i] + g;
        params_d[i] -= config.lr * (momentum > 0 ? buffer_d[i] : g);
      }
    }
    expect_close(params, params_d, 1e-5, 1e-6, "momentum " + std::to_string(momentum));
  }
}

TEST(Sgd, MultiThreadedEqualsSingleThreadedBitForBit) {
  std::mt19937 rng(64);
  const std::size_t count = 100003;
  const SgdConfig config{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01};
  const auto initial = random_floats(count, rng), grads = random_floats(count, rng);
  const auto run = [&](int threads) {
    std::vector<float> params = initial, buffer(count, 0.0f);
    for (int step = 0; step < 2; ++step)
      sgd_step(params.data(), grads.data(), buffer.data(), count, config, threads);
    params.insert(params.end(), buffer.begin(), buffer.end());
    return params;
  };
  const auto single = run(1), multi = run(3);
  EXPECT_EQ(std::memcmp(single.data(), multi.data(), single.size() * sizeof(float)), 0);
}

TEST(Sgd, MomentumWithoutBufferIsRejected) {
  float params[] = {1.0f};
  const float grads[] = {1.0f};
  EXPECT_THROW(sgd_step(params, grads, nullptr, 1, SgdConfig{.lr = 0.1, .momentum = 0.9}),
               std::invalid_argument);
}

}  // namespace
}  // namespace zerolens::kernels
