// The MoE GPT-2 on the CPU executor (exec/model/gpt2_layers.hpp's MoE blocks, the experts and
// router of exec/model/moe_layer.hpp), against two independent references:
//  - a second code path: with one expert, top-1 and a capacity of every token, DeepSpeed's MoE is
//    the dense MLP (the gate is softmax over one logit = 1), so the MoE GPT-2 computes exactly
//    the dense Gpt2Model with the same weights: the loss and every gradient agree to fp32
//    rounding, and the router's gradient is 0;
//  - central differences of the loss: the gradients of the router, an expert's weights and
//    biases, and a dense block's, each within 0.5% of (loss(w + e) - loss(w - e)) / 2e.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "exec/memory/memory_ledger.hpp"
#include "exec/model/gpt2_model.hpp"
#include "moe_gpt2_support.hpp"
#include "sim/core/error.hpp"
#include "solo_communicator.hpp"

namespace zerolens::exec {
namespace {

using testing::initial_weights;
using testing::LayerTensors;
using testing::run_micro_batch;
using testing::tiny_moe_gpt2;
using testing::zeros_like;

constexpr std::int64_t kBatch = 2, kSeq = 16;

Model tiny_dense_gpt2() {
  TransformerShape shape = *model_from_preset("gpt2-tiny").shape;
  shape.dropout = 0;
  return build_transformer("gpt2-tiny", shape);
}

// Weights away from GPT-2's start (biases non-zero, gains not 1), so every tensor matters.
void perturb(LayerTensors& weights, std::uint64_t seed, float spread) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  for (auto& layer : weights) {
    for (auto& tensor : layer) {
      for (float& value : tensor) value += normal(generator);
    }
  }
}

// One expert, top-1, MoE in every block: the dense GPT-2's MLP behind a gate of 1. The MoE
// block's tensors are the dense block's 12 non-MLP tensors, the router [1, h], then the MLP's 4.
TEST(MoeGpt2, OneExpertIsTheDenseModel) {
  const Model dense = tiny_dense_gpt2(), moe = tiny_moe_gpt2(1, 1, 1);
  MemoryLedger ledger;
  Gpt2Model dense_model(dense, {.micro_batch = kBatch, .seq_len = kSeq}, ledger);
  Gpt2Model moe_model(moe, {.micro_batch = kBatch, .seq_len = kSeq}, ledger);
  LayerTensors dense_w = initial_weights(dense, dense_model);
  perturb(dense_w, 7, 0.05f);
  LayerTensors moe_w = initial_weights(moe, moe_model);
  ASSERT_EQ(moe_w.size(), dense_w.size());
  for (std::size_t l = 0; l < dense_w.size(); ++l) {
    if (!moe.layers[l].moe) {
      moe_w[l] = dense_w[l];
      continue;
    }
    ASSERT_EQ(moe_w[l].size(), kBlockParams + 1);
    for (std::size_t t = 0; t < kBlockParams; ++t)
      moe_w[l][t < kMoeRouter ? t : t + 1] = dense_w[l][t];
  }
  LayerTensors dense_g = zeros_like(dense), moe_g = zeros_like(moe);
  const double dense_loss = run_micro_batch(dense, dense_model, dense_w, &dense_g, 3, kBatch);
  const double moe_loss = run_micro_batch(moe, moe_model, moe_w, &moe_g, 3, kBatch);
  EXPECT_NEAR(moe_loss, dense_loss, 1e-6 * dense_loss);
  std::printf("dense loss %.9f, one-expert MoE loss %.9f\n", dense_loss, moe_loss);
  double largest = 0;
  for (std::size_t l = 0; l < dense_g.size(); ++l) {
    for (std::size_t t = 0; t < dense_g[l].size(); ++t) {
      const std::size_t m = moe.layers[l].moe && t >= kMoeRouter ? t + 1 : t;
      const std::vector<float>&a = moe_g[l][m], &b = dense_g[l][t];
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        ASSERT_NEAR(a[i], b[i], 1e-7 + 1e-4 * std::abs(b[i]))
            << moe.layers[l].params[m].name << " [" << i << "]";
        largest = std::max(largest, double(std::abs(a[i] - b[i])));
      }
    }
    if (moe.layers[l].moe) {
      for (const float g : moe_g[l][kMoeRouter]) ASSERT_EQ(g, 0.0f);  // d softmax([z]) / dz = 0
    }
  }
  std::printf("largest gradient difference %.3g\n", largest);
  // Everything a layer kept was freed by its backward.
  EXPECT_EQ(ledger.current(Device::Gpu), 0);
}

// Central differences on gpt2-tiny-moe (4 experts, top-2): for each checked tensor, the 3
// entries with the largest analytic gradient. The router is drawn wide (N(0, 1)) so that no
// token's top-2 changes under a step of 1e-2 (the routing is piecewise constant), and the other
// weights moved off GPT-2's start so that the gradients are well above fp32's noise in the loss.
TEST(MoeGpt2, GradientsMatchCentralDifferences) {
  const Model model = tiny_moe_gpt2();
  MemoryLedger ledger;
  Gpt2Model layers(model, {.micro_batch = kBatch, .seq_len = kSeq}, ledger);
  LayerTensors w = initial_weights(model, layers);
  perturb(w, 11, 0.1f);
  const std::size_t moe_layer = 2;
  ASSERT_TRUE(model.layers[moe_layer].moe.has_value());
  {
    std::mt19937_64 generator(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& value : w[moe_layer][kMoeRouter]) value = normal(generator);
  }
  LayerTensors g = zeros_like(model);
  run_micro_batch(model, layers, w, &g, 0, kBatch);
  const struct {
    std::size_t layer, tensor;
  } checked[] = {{moe_layer, kMoeRouter},
                 {moe_layer, kMoeRouter + 1},  // expert 0 fc_in
                 {moe_layer, kMoeRouter + 4 + 2},
                 {moe_layer, kMoeRouter + 4 + 3},
                 {moe_layer, kMoeRouter + 12 + 1},
                 {moe_layer, kLn2Weight},
                 {moe_layer, kQWeight},
                 {1, kFcInWeight},
                 {0, 0}};
  const float step = 1e-2f;
  for (const auto& [l, t] : checked) {
    const std::string name = model.layers[l].params[t].name;
    std::vector<std::size_t> order(g[l][t].size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + 3, order.end(),
                      [&](auto a, auto b) { return std::abs(g[l][t][a]) > std::abs(g[l][t][b]); });
    for (std::size_t k = 0; k < 3; ++k) {
      const std::size_t i = order[k];
      const float original = w[l][t][i];
      w[l][t][i] = original + step;
      const double up = run_micro_batch(model, layers, w, nullptr, 0, kBatch);
      w[l][t][i] = original - step;
      const double down = run_micro_batch(model, layers, w, nullptr, 0, kBatch);
      w[l][t][i] = original;
      const double numeric = (up - down) / (2 * double(step)), analytic = g[l][t][i];
      std::printf("%-32s [%5zu] analytic %+.6e central %+.6e\n", name.c_str(), i, analytic,
                  numeric);
      EXPECT_NEAR(analytic, numeric, 0.005 * std::abs(numeric) + 1e-6) << name << " [" << i << "]";
    }
  }
}

// What the executor does not run is refused by name: shared experts, a router bias, latent
// attention (sim's own MoE families), a CUDA-only model's MoE (exec/cuda refuses it in
// Gpt2Layers' constructor), an EP rank outside the group.
TEST(MoeGpt2, RefusesWhatItDoesNotRun) {
  MemoryLedger ledger;
  TransformerShape shared = *tiny_moe_gpt2().shape;
  shared.moe->shared_ffn = 64;
  try {
    Gpt2Model(build_transformer("shared", shared), {}, ledger);
    FAIL() << "shared experts were accepted";
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "model.moe.shared_ffn");
  }
  TransformerShape biased = *tiny_moe_gpt2().shape;
  biased.moe->router_bias = true;
  EXPECT_THROW(Gpt2Model(build_transformer("biased", biased), {}, ledger), InputError);
  const Model share = expert_parallel_shard(tiny_moe_gpt2(), {.size = 2});
  EXPECT_THROW(Gpt2Model(share, {.expert_parallel_rank = 2}, ledger), InputError);
  EXPECT_THROW(refuse_mixture_of_experts(tiny_moe_gpt2(), "CudaGpt2Model"), InputError);
  EXPECT_NO_THROW(refuse_mixture_of_experts(tiny_dense_gpt2(), "CudaGpt2Model"));
  // A share of an EP group runs only once the group is connected.
  Gpt2Model unconnected(share, {.micro_batch = 1, .seq_len = 8}, ledger);
  LayerTensors w = initial_weights(share, unconnected);
  EXPECT_THROW(run_micro_batch(share, unconnected, w, nullptr, 0, 1), std::logic_error);
  // A dense model has no experts to connect.
  Gpt2Model dense(tiny_dense_gpt2(), {.micro_batch = 1, .seq_len = 8}, ledger);
  testing::SoloCommunicator solo;
  EXPECT_THROW(dense.connect_expert_parallel(solo), std::logic_error);
}

// EP rank r's share starts as the whole model's experts r x E/ep ..: every EP size starts from
// the same model.
TEST(MoeGpt2, ExpertSharesStartAsTheWholeModelsExperts) {
  const Model whole = tiny_moe_gpt2();
  MemoryLedger ledger;
  Gpt2Model whole_model(whole, {}, ledger);
  const LayerTensors reference = initial_weights(whole, whole_model);
  const Model share = expert_parallel_shard(whole, {.size = 2});
  for (int rank = 0; rank < 2; ++rank) {
    Gpt2Model model(share, {.expert_parallel_rank = rank}, ledger);
    const LayerTensors w = initial_weights(share, model);
    for (std::size_t l = 0; l < w.size(); ++l) {
      for (std::size_t t = 0; t < w[l].size(); ++t) {
        // A MoE block's tensor t past the router is local expert (t - 13) / 4's; the whole
        // model's tensor of the same place in expert rank x 2 + local.
        const std::size_t whole_t =
            share.layers[l].moe && t > kMoeRouter ? t + 4 * 2 * std::size_t(rank) : t;
        EXPECT_EQ(w[l][t], reference[l][whole_t]) << share.layers[l].params[t].name;
      }
    }
  }
}

}  // namespace
}  // namespace zerolens::exec
