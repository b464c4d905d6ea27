// Parameter counts of every preset against the published counts (Hugging Face model cards /
// `sum(p.numel() for p in model.parameters())`), and GPT-3 175B against the closed form
// 12*L*h^2 + 13*L*h + (V + P)*h + 2h worked from the paper's Table 2.1 shape.
#include <gtest/gtest.h>

#include <cmath>

#include "sim/core/error.hpp"
#include "sim/model/model.hpp"
#include "sim/model/presets.hpp"

namespace zerolens {
namespace {

TEST(ModelPresets, ParameterCountsMatchPublishedCounts) {
  const std::pair<const char*, Elements> published[] = {
      {"gpt2-124m", 124'439'808},      {"gpt2-355m", 354'823'168},      {"gpt2-774m", 774'030'080},
      {"gpt2-1.5b", 1'557'611'200},    {"llama2-7b", 6'738'415'616},    {"llama2-13b", 13'015'864'320},
      {"llama2-70b", 68'976'648'192},  {"llama3-8b", 8'030'261'248},    {"llama3-70b", 70'553'706'496},
  };
  for (const auto& [name, count] : published) EXPECT_EQ(model_from_preset(name).parameter_count(), count) << name;
}

TEST(ModelPresets, Gpt3MatchesTheClosedForm) {
  const std::int64_t L = 96, h = 12288, V = 50257, P = 2048;
  const Elements expected = 12 * L * h * h + 13 * L * h + (V + P) * h + 2 * h;
  EXPECT_EQ(model_from_preset("gpt3-175b").parameter_count(), expected);
  EXPECT_EQ(expected, 174'604'259'328);
}

TEST(ModelPresets, EveryListedPresetBuilds) {
  for (const auto& name : model_preset_names()) {
    const Model model = model_from_preset(name);
    EXPECT_GT(model.parameter_count(), 0) << name;
    EXPECT_EQ(model.source, "preset");
  }
}

TEST(ModelPresets, UnknownPresetSuggestsTheClosestName) {
  EXPECT_EQ(model_from_preset("gpt2-1.5B").name, "gpt2-1.5b");  // names match in any case
  try {
    model_from_preset("gpt2-1.6b");
    FAIL();
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("did you mean 'gpt2-1.5b'"), std::string::npos) << error.what();
  }
}

TEST(DenseModel, HasExactlyTheRequestedParameterCount) {
  for (const double n : {1e5, 1e6, 3.3e7, 1.234567e9, 7.5e9, 1.75e11, 1e12, 1e14, 1e15}) {
    EXPECT_EQ(model_from_dense(n).parameter_count(), std::llround(n)) << n;
  }
  EXPECT_EQ(model_from_preset("dense:7.5e9").parameter_count(), 7'500'000'000);
  EXPECT_EQ(model_from_preset("dense:350M").parameter_count(), 350'000'000);
  EXPECT_EQ(model_from_preset("dense:1.5B").parameter_count(), 1'500'000'000);
}

TEST(DenseModel, NameParsesBackToTheSameCount) {
  for (const double n : {1e6, 7.5e9, 1.234567e9, 123456789.0}) {
    const Model model = model_from_dense(n);
    EXPECT_EQ(model_from_preset(model.name).parameter_count(), model.parameter_count()) << model.name;
  }
}

TEST(DenseModel, RejectsOutOfRangeAndMalformedCounts) {
  EXPECT_THROW(model_from_preset("dense:10"), InputError);
  EXPECT_THROW(model_from_preset("dense:2e15"), InputError);
  EXPECT_THROW(model_from_preset("dense:abc"), InputError);
  EXPECT_THROW(model_from_preset("dense:5X"), InputError);
  EXPECT_THROW(model_from_preset("dense:nan"), InputError);
}

// Korthikanti et al. 2022, Sec. 4.1: a GPT block without tensor parallelism keeps
// s*b*h*34 + 5*a*s^2*b bytes with 16-bit activations, eager attention and dropout.
TEST(ActivationMemory, GptBlockMatchesKorthikantiEquation) {
  const Model model = model_from_preset("gpt2-1.5b");
  const Layer& block = model.layers[1];
  ASSERT_EQ(block.kind, LayerKind::TransformerBlock);
  const std::int64_t s = 1024, b = 4, h = 1600, a = 25;
  EXPECT_EQ(block.activation_bytes(b, s, 2).stored, s * b * h * 34 + 5 * a * s * s * b);
  // With full checkpointing only the block input (2sbh bytes) is kept.
  EXPECT_EQ(block.activation_bytes(b, s, 2).checkpoint, 2 * s * b * h);
}

TEST(ActivationMemory, FlashAttentionDropsTheQuadraticTerm) {
  const Model eager = model_from_preset("gpt2-124m");
  TransformerShape shape = *eager.shape;
  shape.attention = AttentionImpl::Flash;
  const Model flash = build_transformer("flash", shape);
  const std::int64_t s = 1024, b = 1, h = 768, a = 12;
  // 34sbh plus the fp32 log-sum-exp (4 bytes per head and token) instead of 5as^2b.
  EXPECT_EQ(flash.layers[1].activation_bytes(b, s, 2).stored, s * b * h * 34 + 4 * a * s * b);
  EXPECT_EQ(flash.parameter_count(), eager.parameter_count());
}

}  // namespace
}  // namespace zerolens
