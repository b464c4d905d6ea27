// Hugging Face config.json files (kept under tests/data/hf, copied from the model repositories)
// against the models' published parameter counts, and the layer-list JSON round trip.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sim/model/layers_json.hpp"
#include "sim/model/model_io.hpp"
#include "sim/model/presets.hpp"

namespace zerolens {
namespace {

using nlohmann::json;

std::string data(const std::string& name) { return std::string(ZEROLENS_TEST_DATA) + "/" + name; }

json read(const std::string& name) {
  std::ifstream file(data(name));
  return json::parse(file);
}

Model from_hf(const json& config) {
  Diagnostics diagnostics;
  return model_from_hf_config(config, diagnostics, "config.json");
}

TEST(HfConfig, PublishedParameterCounts) {
  const std::pair<const char*, Elements> published[] = {
      {"hf/gpt2.json", 124'439'808},           {"hf/gpt2-xl.json", 1'557'611'200},
      {"hf/Llama-2-7b-hf.json", 6'738'415'616}, {"hf/Meta-Llama-3-8B.json", 8'030'261'248},
      {"hf/Mistral-7B-v0.1.json", 7'241'732'096}, {"hf/TinyLlama-1.1B.json", 1'100'048'384},
      {"hf/Llama-3.2-1B.json", 1'235'814'400},  // tied embeddings, explicit head_dim
  };
  for (const auto& [file, count] : published) {
    Diagnostics diagnostics;
    EXPECT_EQ(load_model(data(file), diagnostics).parameter_count(), count) << file;
  }
}

TEST(HfConfig, SameShapeAsThePreset) {
  const Model hf = from_hf(read("hf/Llama-2-7b-hf.json"));
  const Model preset = model_from_preset("llama2-7b");
  ASSERT_EQ(hf.layers.size(), preset.layers.size());
  for (std::size_t i = 0; i < hf.layers.size(); ++i) {
    EXPECT_EQ(hf.layers[i].numel(), preset.layers[i].numel()) << i;
    EXPECT_EQ(hf.layers[i].activation_bytes(2, 512, 2).stored, preset.layers[i].activation_bytes(2, 512, 2).stored) << i;
  }
  EXPECT_EQ(hf.default_seq_len, 4096);
}

TEST(HfConfig, BiasesAndTyingChangeTheCount) {
  json config = read("hf/TinyLlama-1.1B.json");
  const Elements base = from_hf(config).parameter_count();
  config["attention_bias"] = true;  // q, k, v and o biases: 2048 + 256 + 256 + 2048 per layer
  EXPECT_EQ(from_hf(config).parameter_count() - base, 22 * (2048 + 256 + 256 + 2048));
  config["attention_bias"] = false;
  config["tie_word_embeddings"] = true;
  EXPECT_EQ(base - from_hf(config).parameter_count(), 32000 * 2048);
}

TEST(HfConfig, ErrorsNameTheKey) {
  json config = read("hf/gpt2.json");
  config.erase("n_layer");
  try {
    from_hf(config);
    FAIL();
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "config.json.n_layer");
  }
  config = read("hf/Meta-Llama-3-8B.json");
  config["num_key_value_heads"] = 7;
  EXPECT_THROW(from_hf(config), InputError);
  config["num_key_value_heads"] = "8";
  try {
    from_hf(config);
    FAIL();
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "config.json.num_key_value_heads");
  }
  config["model_type"] = "t5";
  EXPECT_THROW(from_hf(config), InputError);
  EXPECT_THROW(from_hf(json::array()), InputError);
}

TEST(HfConfig, WarnsAboutTheIgnoredSlidingWindow) {
  Diagnostics diagnostics;
  model_from_hf_config(read("hf/Mistral-7B-v0.1.json"), diagnostics, "mistral");
  ASSERT_EQ(diagnostics.warnings.size(), 1u);
  EXPECT_NE(diagnostics.warnings[0].find("sliding_window"), std::string::npos);
}

TEST(LayersJson, RoundTripKeepsCountsActivationsAndFlops) {
  for (const char* name : {"gpt2-124m", "llama3-8b", "gpt2-tiny"}) {
    const Model original = model_from_preset(name);
    Diagnostics diagnostics;
    const Model copy = model_from_layers_json(json::parse(model_to_json(original).dump()), diagnostics, "copy");
    EXPECT_TRUE(diagnostics.warnings.empty());
    EXPECT_EQ(copy.parameter_count(), original.parameter_count()) << name;
    ASSERT_EQ(copy.layers.size(), original.layers.size());
    for (std::size_t i = 0; i < copy.layers.size(); ++i) {
      const auto a = copy.layers[i].activation_bytes(3, 256, 2);
      const auto b = original.layers[i].activation_bytes(3, 256, 2);
      EXPECT_EQ(a.stored, b.stored);
      EXPECT_EQ(a.backward_working, b.backward_working);
      EXPECT_EQ(copy.layers[i].shares_params_of, original.layers[i].shares_params_of);
    }
    EXPECT_DOUBLE_EQ(copy.forward_flops_per_step(2, 128), original.forward_flops_per_step(2, 128));
  }
}

TEST(LayersJson, ReadsTheDocumentedExample) {
  Diagnostics diagnostics;
  const Model model = load_model(data("models/two-layer-mlp.json"), diagnostics);
  EXPECT_EQ(model.parameter_count(), 1024 * 4096 + 4096 + 4096 * 1024 + 1024);
  EXPECT_EQ(model.default_seq_len, 512);
}

TEST(LayersJson, RejectsBadLayers) {
  Diagnostics diagnostics;
  auto fails_at = [&](const json& document, const std::string& where) {
    try {
      model_from_layers_json(document, diagnostics, "m");
      ADD_FAILURE() << "expected an error at " << where;
    } catch (const InputError& error) {
      EXPECT_EQ(error.where(), where);
    }
  };
  fails_at(json{{"layers", json::array()}}, "m.layers");
  fails_at(json::parse(R"({"layers":[{"name":"a","params":[{"name":"w","shape":[4,-1]}]}]})"), "m.layers[0].params[0].shape[1]");
  fails_at(json::parse(R"({"layers":[{"name":"a","params":[{"name":"w","shape":[4]}]},{"name":"a"}]})"), "m.layers[1].name");
  fails_at(json::parse(R"({"layers":[{"name":"a","shares_params_of":"b"}]})"), "m.layers[0].shares_params_of");
  fails_at(json::parse(R"({"layers":[{"name":"a","params":[{"name":"w","shape":[4294967296,4294967296]}]}]})"),
           "m.layers[0].params[0].shape");
}

TEST(LoadModel, UnknownFileOrPresetIsAnError) {
  Diagnostics diagnostics;
  EXPECT_THROW(load_model("/nonexistent/model.json", diagnostics), InputError);
  EXPECT_THROW(load_model("gpt5", diagnostics), InputError);
}

}  // namespace
}  // namespace zerolens
