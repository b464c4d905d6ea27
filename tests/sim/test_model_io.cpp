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

// Qwen2, Qwen3, Gemma, Gemma 2 and Phi-3 (issue 21), from their config.json files, against the
// totals their model pages give (7.62B, 8.19B, 8.54B, 2.61B, 3.82B), worked by hand per block
// from the modeling files' projections (h hidden, q heads x head_dim, k kv heads x head_dim, f
// the MLP width, v the vocabulary):
//   Qwen2-7B   28 x (h(q + 2k) + (q + 2k) biases + qh + 3hf + 2h) + 2vh + h, untied
//   Qwen3-8B   36 x (h(q + 2k) + qh + 2 x 128 q/k norms + 3hf + 2h) + 2vh + h, untied
//   Gemma-7B   28 x (h(q + 2k) + qh + 3hf + 2h) + vh + h, tied
//   Gemma2-2B  26 x (h(q + 2k) + qh + 3hf + 4h) + vh + h, tied, four norms a block
//   Phi-3-mini 32 x (h(q + 2k) + qh + 3hf + 2h) + 2vh + h (fused qkv and gate_up, same counts)
TEST(HfConfig, QwenGemmaPhiPublishedParameterCounts) {
  const auto block = [](Elements h, Elements q, Elements k, Elements f, Elements extra) {
    return h * (q + 2 * k) + q * h + 3 * h * f + extra;
  };
  const std::pair<const char*, Elements> published[] = {
      {"hf/Qwen2-7B-Instruct.json",
       28 * block(3584, 3584, 512, 18944, 3584 + 2 * 512 + 2 * 3584) + 2 * 152064 * 3584 + 3584},
      {"hf/Qwen3-8B.json",
       36 * block(4096, 4096, 1024, 12288, 2 * 128 + 2 * 4096) + 2 * 151936 * 4096 + 4096},
      {"hf/gemma-7b.json", 28 * block(3072, 4096, 4096, 24576, 2 * 3072) + 256000 * 3072 + 3072},
      {"hf/gemma-2-2b.json", 26 * block(2304, 2048, 1024, 9216, 4 * 2304) + 256000 * 2304 + 2304},
      {"hf/Phi-3-mini-4k-instruct.json",
       32 * block(3072, 3072, 3072, 8192, 2 * 3072) + 2 * 32064 * 3072 + 3072},
  };
  const double pages[] = {7.62e9, 8.19e9, 8.54e9, 2.61e9, 3.82e9};
  for (std::size_t i = 0; i < std::size(published); ++i) {
    const auto& [file, count] = published[i];
    Diagnostics diagnostics;
    const Elements loaded = load_model(data(file), diagnostics).parameter_count();
    EXPECT_EQ(loaded, count) << file;
    EXPECT_NEAR(double(loaded), pages[i], 0.005e9) << file;
  }
  EXPECT_EQ(7'615'616'512, published[0].second);  // Qwen2-7B's safetensors total
}

// Gemma 3's multimodal config.json (google/gemma-3-4b-it, model_type "gemma3"): the text stack
// under text_config, its missing keys Gemma3TextConfig's defaults (vocabulary 262,208, 8 heads,
// 4 KV heads of 256, tied), is what is planned; the vision tower is left out, with its count in
// the warning. Worked by hand (h 2560, q 8 x 256, k 4 x 256, f 10240, four norms a block and the
// q/k norms of 256):
//   block  2560 x (2048 + 2 x 1024) + 2048 x 2560 + 3 x 2560 x 10240 + 4 x 2560 + 2 x 256
//          = 94,382,592;  text = 34 x block + 262,208 x 2560 + 2560 = 3,880,263,168
//   SigLIP (h 1152, f 4304, 27 layers, 896 / 14 = 64 x 64 positions, 3 channels):
//          conv 3 x 14 x 14 x 1152 + 1152 = 678,528; positions 4096 x 1152 = 4,718,592;
//          layer 4 x 1152 + 4 x (1152^2 + 1152) + (4304 x 1152 + 4304) + (1152 x 4304 + 1152)
//          = 15,239,504, x 27 = 411,466,608; final norm 2304: tower 416,866,032
//   projector 1152 x 2560 + 1152 = 2,950,272
// and text + tower + projector = 4,300,079,472, the checkpoint's published total (4.3B).
TEST(HfConfig, Gemma3MultimodalPlansItsTextStack) {
  Diagnostics notes;
  const Model model = load_model(data("hf/gemma-3-4b-it.json"), notes);
  const Elements block =
      2560 * (2048 + 2 * 1024) + 2048 * 2560 + 3 * 2560 * 10240 + 4 * 2560 + 2 * 256;
  EXPECT_EQ(block, 94'382'592);
  EXPECT_EQ(model.parameter_count(), 34 * block + Elements(262'208) * 2560 + 2560);
  EXPECT_EQ(model.parameter_count(), 3'880'263'168);
  EXPECT_EQ(model.layers.back().shares_params_of, 0);  // tied, Gemma3TextConfig's default
  const Elements tower = 678'528 + 4'718'592 + 27 * 15'239'504 + 2304, projector = 2'950'272;
  EXPECT_EQ(model.parameter_count() + tower + projector, 4'300'079'472);
  std::string left_out;
  for (const std::string& warning : notes.warnings)
    if (warning.find("vision_config") != std::string::npos) left_out = warning;
  EXPECT_NE(left_out.find("left out"), std::string::npos) << left_out;
  EXPECT_NE(left_out.find(std::to_string(tower + projector) + " parameters"), std::string::npos)
      << left_out;

  // The same stack as a text-only gemma3_text config (Gemma3ForCausalLM) gives the same model.
  json text = read("hf/gemma-3-4b-it.json")["text_config"];
  EXPECT_EQ(from_hf(text).parameter_count(), model.parameter_count());
  // Errors name the nested key.
  json bad = read("hf/gemma-3-4b-it.json");
  bad["text_config"]["num_hidden_layers"] = 0;
  EXPECT_THROW(
      {
        try {
          from_hf(bad);
        } catch (const InputError& error) {
          EXPECT_EQ(error.where(), "config.json.text_config.num_hidden_layers");
          throw;
        }
      },
      InputError);
  bad = read("hf/gemma-3-4b-it.json");
  bad.erase("text_config");
  EXPECT_THROW(from_hf(bad), InputError);
  bad = read("hf/gemma-3-4b-it.json");
  bad["vision_config"]["patch_size"] = 15;
  EXPECT_THROW(from_hf(bad), InputError);
}

// What each family changes in a block: Qwen2 biases q, k and v but not o; Qwen3 norms each head's
// queries and keys, which keeps their projections for backward; Gemma 2's extra norms keep the
// attention and MLP outputs. Sliding windows and soft-capped logits are named as ignored.
TEST(HfConfig, FamilyBlocksAndWarnings) {
  const auto names = [](const Layer& layer) {
    std::string all;
    for (const TensorSpec& tensor : layer.params) all += tensor.name + " ";
    return all;
  };
  Diagnostics qwen2_notes;
  const Model qwen2 = model_from_hf_config(read("hf/Qwen2-7B-Instruct.json"), qwen2_notes, "qwen2");
  EXPECT_NE(names(qwen2.layers[1]).find("q_proj.bias"), std::string::npos);
  EXPECT_EQ(names(qwen2.layers[1]).find("o_proj.bias"), std::string::npos);
  EXPECT_TRUE(qwen2_notes.warnings.empty());  // use_sliding_window false

  json config = read("hf/Qwen3-8B.json");
  const Model qwen3 = from_hf(config);
  config["model_type"] = "llama";
  const Model llama = from_hf(config);
  EXPECT_EQ(qwen3.layers[1].numel() - llama.layers[1].numel(), 2 * 128);
  const Elements q = 32 * 128, k = 8 * 128;
  EXPECT_EQ(qwen3.layers[1].activation_bytes(1, 16, 2).stored -
                llama.layers[1].activation_bytes(1, 16, 2).stored,
            16 * (q + k) * 2);

  Diagnostics gemma_notes;
  json gemma2 = read("hf/gemma-2-2b.json");
  const Model sandwich = model_from_hf_config(gemma2, gemma_notes, "gemma2");
  EXPECT_EQ(gemma_notes.warnings.size(), 3u);  // two soft caps and the sliding window
  gemma2["model_type"] = "gemma";
  const Model plain = from_hf(gemma2);
  EXPECT_EQ(sandwich.layers[1].numel() - plain.layers[1].numel(), 2 * 2304);
  EXPECT_EQ(sandwich.layers[1].activation_bytes(1, 16, 2).stored -
                plain.layers[1].activation_bytes(1, 16, 2).stored,
            16 * 2 * 2304 * 2);
  EXPECT_EQ(sandwich.layers.back().shares_params_of, 0);  // Gemma ties by default

  // A written model keeps the QK and sandwich norms in its shape: a TP shard rebuilt from it has
  // them, and a file written before them (no key) still reads.
  for (const Model* model : {&qwen3, &sandwich}) {
    Diagnostics copy_notes;
    json written = model_to_json(*model);
    const Model copy = model_from_layers_json(written, copy_notes, "copy");
    ASSERT_TRUE(copy.shape.has_value());
    EXPECT_EQ(copy.shape->qk_norm, model->shape->qk_norm);
    EXPECT_EQ(copy.shape->sandwich_norms, model->shape->sandwich_norms);
    EXPECT_EQ(build_transformer("again", *copy.shape).parameter_count(), model->parameter_count());
  }
  json older = model_to_json(llama);
  ASSERT_FALSE(older["transformer"].contains("qk_norm"));
  Diagnostics older_notes;
  EXPECT_FALSE(model_from_layers_json(older, older_notes, "older").shape->qk_norm);
}

// The new presets are their config.json files, layer by layer; the names people type (Hugging
// Face ids, GPT-2's short names, any case) reach them, and an unknown hub id says what to do.
TEST(HfConfig, FamilyPresetsAndTheNamesPeopleType) {
  const std::pair<const char*, const char*> pairs[] = {
      {"mistral-7b", "hf/Mistral-7B-v0.1.json"}, {"qwen2-7b", "hf/Qwen2-7B-Instruct.json"},
      {"qwen3-8b", "hf/Qwen3-8B.json"},          {"gemma-7b", "hf/gemma-7b.json"},
      {"gemma2-2b", "hf/gemma-2-2b.json"},       {"phi3-mini", "hf/Phi-3-mini-4k-instruct.json"}};
  for (const auto& [preset_name, file] : pairs) {
    const Model preset = model_from_preset(preset_name);
    const Model hf = from_hf(read(file));
    ASSERT_EQ(preset.layers.size(), hf.layers.size()) << preset_name;
    for (std::size_t i = 0; i < hf.layers.size(); ++i) {
      EXPECT_EQ(preset.layers[i].numel(), hf.layers[i].numel()) << preset_name << " " << i;
      EXPECT_EQ(preset.layers[i].activation_bytes(1, 64, 2).stored,
                hf.layers[i].activation_bytes(1, 64, 2).stored)
          << preset_name << " " << i;
    }
    EXPECT_EQ(preset.default_seq_len, hf.default_seq_len) << preset_name;
  }
  EXPECT_EQ(model_from_preset("gpt2").name, "gpt2-124m");
  EXPECT_EQ(model_from_preset("GPT2-XL").name, "gpt2-1.5b");
  EXPECT_EQ(model_from_preset("meta-llama/Llama-2-7b-hf").name, "llama2-7b");
  EXPECT_EQ(model_from_preset("Qwen/Qwen2-7B-Instruct").name, "qwen2-7b");
  try {
    model_from_preset("Qwen/Qwen2-72B");
    ADD_FAILURE() << "an unknown hub id was planned";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("--hf-config"), std::string::npos) << error.what();
  }
  try {
    model_from_preset("meta-llama/Llama-2-7b");
    ADD_FAILURE() << "a mistyped hub id was planned";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("did you mean 'meta-llama/llama-2-7b-hf'"),
              std::string::npos)
        << error.what();
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
