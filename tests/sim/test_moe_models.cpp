// The mixture-of-experts families from their config.json files (tests/data/hf) against the model
// cards' totals, each equal to a hand formula written from the Hugging Face modeling files, and
// the parameters one token uses (active) to the cards' activated counts.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sim/model/layers_json.hpp"
#include "sim/model/model_io.hpp"
#include "sim/model/presets.hpp"

namespace zerolens {
namespace {

using nlohmann::json;

std::string data(const std::string& name) {
  return std::string(ZEROLENS_TEST_DATA) + "/" + name;
}

Model load(const std::string& file, Diagnostics& diagnostics) {
  return load_model(data("hf/" + file), diagnostics);
}
Model load(const std::string& file) {
  Diagnostics diagnostics;
  return load(file, diagnostics);
}

// A SwiGLU MLP of width f over hidden h: gate, up [f, h] and down [h, f].
constexpr Elements swiglu(Elements h, Elements f) {
  return 3 * h * f;
}
// Grouped-query attention: q [q, h], k and v [kv, h], o [h, q].
constexpr Elements gqa(Elements h, Elements q, Elements kv) {
  return h * (q + 2 * kv) + q * h;
}

// Mixtral-8x7B (card: 46.7B total, 12.9B active). 32 layers of h 4096: attention with 8 of 32
// heads for k and v (head 128), a router [8, h], 8 experts of width 14336, two norms; untied
// embedding and head of 32000 x 4096, a final norm.
TEST(MoeModels, MixtralTotalAndActive) {
  constexpr Elements h = 4096, v = 32000, expert = swiglu(h, 14336);
  constexpr Elements shared_part = gqa(h, 4096, 1024) + 8 * h + 2 * h;  // attention, router, norms
  constexpr Elements total = 32 * (shared_part + 8 * expert) + 2 * v * h + h;
  constexpr Elements active = 32 * (shared_part + 2 * expert) + 2 * v * h + h;
  const Model model = load("Mixtral-8x7B-v0.1.json");
  EXPECT_EQ(model.parameter_count(), total);
  EXPECT_EQ(total, 46'702'792'704);
  EXPECT_NEAR(double(total), 46.7e9, 0.05e9);
  EXPECT_EQ(model.active_parameter_count(), active);
  EXPECT_NEAR(double(active), 12.9e9, 0.05e9);
  EXPECT_EQ(model.expert_parameter_count(), 32 * 8 * expert);
}

// Qwen1.5-MoE-A2.7B (card: 14.3B total, 2.7B activated). 24 layers of h 2048: attention with q/k/v
// biases (16 heads of 128), a router [60, h], 60 experts of 1408, a shared expert of 5632 and its
// gate [1, h], two norms; untied 151936-token embedding and head.
TEST(MoeModels, QwenMoeA27bTotalAndActive) {
  constexpr Elements h = 2048, v = 151936, expert = swiglu(h, 1408);
  constexpr Elements shared_part =
      gqa(h, 2048, 2048) + 3 * 2048 + 60 * h + swiglu(h, 5632) + h + 2 * h;
  constexpr Elements total = 24 * (shared_part + 60 * expert) + 2 * v * h + h;
  constexpr Elements active = 24 * (shared_part + 4 * expert) + 2 * v * h + h;
  const Model model = load("Qwen1.5-MoE-A2.7B.json");
  EXPECT_EQ(model.parameter_count(), total);
  EXPECT_EQ(total, 14'315'784'192);
  EXPECT_NEAR(double(total), 14.3e9, 0.05e9);
  EXPECT_EQ(model.active_parameter_count(), active);
  EXPECT_NEAR(double(active), 2.7e9, 0.05e9);
}

// Qwen3-30B-A3B (card: 30.5B total, 3.3B activated). 48 layers of h 2048: 32 query heads and 4
// key/value heads of 128 with per-head q/k norms, a router [128, h], 128 experts of 768, two
// norms; untied 151936-token embedding and head.
TEST(MoeModels, Qwen3MoeTotalAndActive) {
  constexpr Elements h = 2048, v = 151936, expert = swiglu(h, 768);
  constexpr Elements shared_part = gqa(h, 4096, 512) + 2 * 128 + 128 * h + 2 * h;
  constexpr Elements total = 48 * (shared_part + 128 * expert) + 2 * v * h + h;
  constexpr Elements active = 48 * (shared_part + 8 * expert) + 2 * v * h + h;
  const Model model = load("Qwen3-30B-A3B.json");
  EXPECT_EQ(model.parameter_count(), total);
  EXPECT_EQ(total, 30'532'122'624);
  EXPECT_NEAR(double(total), 30.5e9, 0.05e9);
  EXPECT_EQ(model.active_parameter_count(), active);
  EXPECT_NEAR(double(active), 3.3e9, 0.06e9);
}

// DeepSeek's MLA with heads n: q through q_a [r_q, h], its norm r_q, q_b [n (nope + rope), r_q]
// (or q_proj [n (nope + rope), h] when q_lora_rank is null), kv_a [r_kv + rope, h], its norm r_kv,
// kv_b [n (nope + v), r_kv], o [h, n v].
constexpr Elements mla(Elements h, Elements n, Elements r_q, Elements r_kv) {
  const Elements qk = 128 + 64, q = r_q > 0 ? h * r_q + r_q + r_q * n * qk : h * n * qk;
  return q + h * (r_kv + 64) + r_kv + r_kv * n * (128 + 128) + n * 128 * h;
}

// DeepSeek-V2-Lite (card: 15.7B total, 2.4B activated). 27 layers of h 2048, 16 heads, no
// low-rank query; layer 0 dense (10944 wide), the other 26 a router [64, h], 64 experts of 1408
// and 2 shared experts (one MLP of 2 x 1408); untied 102400-token embedding and head. DeepSeek's
// activated count leaves out the embedding table (a lookup), as its V3 note says it does.
TEST(MoeModels, DeepSeekV2LiteTotalAndActive) {
  constexpr Elements h = 2048, v = 102400, expert = swiglu(h, 1408);
  constexpr Elements attention = mla(h, 16, 0, 512) + 2 * h;
  constexpr Elements moe_part = attention + 64 * h + swiglu(h, 2 * 1408);
  constexpr Elements total =
      (attention + swiglu(h, 10944)) + 26 * (moe_part + 64 * expert) + 2 * v * h + h;
  constexpr Elements active =
      (attention + swiglu(h, 10944)) + 26 * (moe_part + 6 * expert) + 2 * v * h + h;
  const Model model = load("DeepSeek-V2-Lite.json");
  EXPECT_EQ(model.parameter_count(), total);
  EXPECT_EQ(total, 15'706'484'224);
  EXPECT_NEAR(double(total), 15.7e9, 0.05e9);
  EXPECT_EQ(model.active_parameter_count(), active);
  EXPECT_NEAR(double(active - v * h), 2.4e9, 0.06e9);
}

// DeepSeek-V3 (card: 671B main model, 37B activated; the weights' note: 36.6B activated including
// the 0.9B head, and a multi-token-prediction module of 11.5B more, not counted here: Hugging
// Face's DeepseekV3ForCausalLM does not build it, and the plan warns). 61 layers of h 7168, 128
// heads, q_lora_rank 1536, kv_lora_rank 512; 3 dense layers of 18432, then 58 MoE layers: a
// router [256, h] with its noaux_tc correction bias (256), 256 experts of 2048, one shared expert;
// untied 129280-token embedding and head.
TEST(MoeModels, DeepSeekV3TotalAndActive) {
  constexpr Elements h = 7168, v = 129280, expert = swiglu(h, 2048);
  constexpr Elements attention = mla(h, 128, 1536, 512) + 2 * h;
  constexpr Elements moe_part = attention + 256 * h + 256 + swiglu(h, 2048);
  constexpr Elements dense = 3 * (attention + swiglu(h, 18432));
  constexpr Elements total = dense + 58 * (moe_part + 256 * expert) + 2 * v * h + h;
  constexpr Elements active = dense + 58 * (moe_part + 8 * expert) + 2 * v * h + h;
  Diagnostics diagnostics;
  const Model model = load("DeepSeek-V3.json", diagnostics);
  EXPECT_EQ(model.parameter_count(), total);
  EXPECT_EQ(total, 671'026'419'200);
  EXPECT_NEAR(double(total), 671e9, 0.5e9);
  EXPECT_EQ(model.active_parameter_count(), active);
  EXPECT_NEAR(double(active - v * h), 36.6e9, 0.05e9);
  bool warned = false;
  for (const std::string& warning : diagnostics.warnings) {
    warned = warned || warning.find("num_nextn_predict_layers") != std::string::npos;
  }
  EXPECT_TRUE(warned);
}

// Which layers are MoE: DeepSeek's first_k_dense_replace, Qwen's decoder_sparse_step and
// mlp_only_layers (modeling_qwen2_moe.py: MoE unless listed, where (i + 1) % step == 0).
TEST(MoeModels, DenseAndSparseLayers) {
  const Model lite = load("DeepSeek-V2-Lite.json");
  EXPECT_FALSE(lite.layers[1].moe.has_value());  // layer 0 (after the embedding)
  EXPECT_TRUE(lite.layers[2].moe.has_value());
  json qwen = json::parse(std::ifstream(data("hf/Qwen3-30B-A3B.json")));
  qwen["decoder_sparse_step"] = 2;
  qwen["mlp_only_layers"] = {3};
  Diagnostics diagnostics;
  const Model stepped = model_from_hf_config(qwen, diagnostics, "config.json");
  std::vector<int> moe_layers;
  for (int i = 0; i < 8; ++i) {
    if (stepped.layers[std::size_t(i) + 1].moe) moe_layers.push_back(i);
  }
  EXPECT_EQ(moe_layers, (std::vector<int>{1, 5, 7}));
}

// Bad keys are named: a top-k above the experts, DeepSeek's unsupported moe_layer_freq.
TEST(MoeModels, BadKeysAreNamed) {
  json mixtral = json::parse(std::ifstream(data("hf/Mixtral-8x7B-v0.1.json")));
  mixtral["num_experts_per_tok"] = 9;
  Diagnostics diagnostics;
  try {
    model_from_hf_config(mixtral, diagnostics, "config.json");
    FAIL() << "top-k above the experts was accepted";
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "config.json.num_experts_per_tok");
  }
  json many = json::parse(std::ifstream(data("hf/Qwen3-30B-A3B.json")));
  many["num_experts"] = 65536;
  many["num_experts_per_tok"] = 2;
  try {
    model_from_hf_config(many, diagnostics, "config.json");
    FAIL() << "65536 experts x 48 layers were accepted";
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "config.json.num_experts");
  }
  json lite = json::parse(std::ifstream(data("hf/DeepSeek-V2-Lite.json")));
  lite["moe_layer_freq"] = 2;
  EXPECT_THROW(model_from_hf_config(lite, diagnostics, "config.json"), InputError);
  lite.erase("moe_layer_freq");
  lite.erase("kv_lora_rank");
  try {
    model_from_hf_config(lite, diagnostics, "config.json");
    FAIL() << "a missing kv_lora_rank was accepted";
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "config.json.kv_lora_rank");
  }
}

// gpt2-tiny-moe (sim/model/presets.cpp): gpt2-tiny (h 64, 4 heads, vocabulary 256, 128 positions,
// 2 blocks) whose second block's MLP is a DeepSpeed MoE of 4 GPT-2 MLP experts, top-2. By hand:
//   embeddings: wte 256 x 64 = 16,384, wpe 128 x 64 = 8,192;
//   a block's non-MLP tensors: ln_1 and ln_2 (w, b) 4 x 64 = 256, q/k/v/o 4 x (64 x 64 + 64) =
//   16,640: 16,896;
//   GPT-2's MLP: fc_in 256 x 64 + 256 = 16,640, fc_out 64 x 256 + 64 = 16,448: 33,088;
//   block 0 dense: 16,896 + 33,088 = 49,984; block 1: 16,896 + router 4 x 64 = 256 + 4 x 33,088
//   = 132,352: 149,504; ln_f 128; the head tied.
//   Total 16,384 + 8,192 + 49,984 + 149,504 + 128 = 224,192 (gpt2-tiny's 124,672 + 99,520).
//   Active (top-2 of 4 experts): 224,192 - 2 x 33,088 = 158,016.
//   One rank's shard at ep 2 holds 2 experts: 224,192 - 2 x 33,088 = 158,016 as well.
TEST(MoeModels, Gpt2TinyMoeCountsByHand) {
  const Model model = model_from_preset("gpt2-tiny-moe");
  EXPECT_EQ(model.parameter_count(), 224'192);
  EXPECT_EQ(model.expert_parameter_count(), 4 * 33'088);
  EXPECT_EQ(model.active_parameter_count(), 158'016);
  ASSERT_EQ(model.layers.size(), 5u);
  EXPECT_FALSE(model.layers[1].moe.has_value());
  ASSERT_TRUE(model.layers[2].moe.has_value());
  // The block's tensor order: GPT-2's 12 non-MLP tensors, the router, each expert's four.
  const std::vector<TensorSpec>& p = model.layers[2].params;
  ASSERT_EQ(p.size(), 12u + 1 + 4 * 4);
  const char* names[] = {"ln_1.weight",        "ln_1.bias",          "attn.q_proj.weight",
                         "attn.q_proj.bias",   "attn.k_proj.weight", "attn.k_proj.bias",
                         "attn.v_proj.weight", "attn.v_proj.bias",   "attn.o_proj.weight",
                         "attn.o_proj.bias",   "ln_2.weight",        "ln_2.bias",
                         "mlp.gate.weight"};
  for (std::size_t i = 0; i < 13; ++i) EXPECT_EQ(p[i].name, "h.1." + std::string(names[i]));
  EXPECT_EQ(p[12].shape, (std::vector<std::int64_t>{4, 64}));
  EXPECT_FALSE(p[12].expert);
  const char* expert[] = {"fc_in.weight", "fc_in.bias", "fc_out.weight", "fc_out.bias"};
  for (std::size_t e = 0; e < 4; ++e) {
    for (std::size_t t = 0; t < 4; ++t) {
      const TensorSpec& tensor = p[13 + 4 * e + t];
      EXPECT_EQ(tensor.name, "h.1.mlp.experts." + std::to_string(e) + "." + expert[t]);
      EXPECT_TRUE(tensor.expert);
    }
  }
  EXPECT_EQ(p[13].shape, (std::vector<std::int64_t>{256, 64}));
  EXPECT_EQ(p[15].shape, (std::vector<std::int64_t>{64, 256}));
  // A dense block of it is GPT-2's block: gpt2-tiny's tensors, activations and FLOPs.
  const Model dense = model_from_preset("gpt2-tiny");
  ASSERT_EQ(model.layers[1].params.size(), dense.layers[1].params.size());
  for (std::size_t i = 0; i < dense.layers[1].params.size(); ++i) {
    EXPECT_EQ(model.layers[1].params[i].name, dense.layers[1].params[i].name);
    EXPECT_EQ(model.layers[1].params[i].shape, dense.layers[1].params[i].shape);
  }
  const ActivationBytes a = model.layers[1].activation_bytes(2, 128, 2),
                        b = dense.layers[1].activation_bytes(2, 128, 2);
  EXPECT_EQ(a.stored, b.stored);
  EXPECT_EQ(a.backward_working, b.backward_working);
  EXPECT_EQ(model.layers[1].forward_flops(2, 128), dense.layers[1].forward_flops(2, 128));
  // The MoE block's experts: GELU rows (2 f kept, 2 h f weights), dropless: top-2 x tokens rows.
  const MoeRouting& r = *model.layers[2].moe;
  EXPECT_EQ(r.rows(256), 2 * 256);
  EXPECT_EQ(r.row_flops, 2.0 * 2 * 64 * 256);
  EXPECT_EQ(r.row_elements, 2 * 64 + 2 * 256 + 1);

  const Model shard = expert_parallel_shard(model, {.size = 2});
  EXPECT_EQ(shard.parameter_count(), 158'016);
  EXPECT_EQ(shard.expert_parameter_count(), 2 * 33'088);
  EXPECT_EQ(shard.layers[2].params.size(), 12u + 1 + 2 * 4);
  EXPECT_EQ(shard.layers[2].moe->local_experts, 2);
  EXPECT_THROW(expert_parallel_shard(model, {.size = 3}), InputError);
  // The layer-list format says it with its shape's "moe" key (docs/model-format.md).
  Diagnostics diagnostics;
  const Model copy =
      model_from_layers_json(json::parse(model_to_json(model).dump()), diagnostics, "copy");
  EXPECT_EQ(copy.parameter_count(), 224'192);
  EXPECT_EQ(copy.layers[2].params.size(), p.size());
}

// The MoE block's backward working set of gpt2-tiny-moe (h 64, 4 eager heads, E 4, k 2, f 256)
// at micro-batch 4 x 64 in fp32, T = 256 tokens, worked by hand. Autograd finishes the MoE MLP's
// backward and frees its gradients before the attention's backward, so it is the token terms plus
// the wider of two phases:
//   token terms, the block output's and input's gradients 2h: 256 x 4 x 128 = 131,072;
//   attention phase, the score gradients a per head and position: 256 x 4 x 64 x 4 = 262,144;
//   rows phase with EP 2, C = ceil(256 / 4 x 1.0 x 2) = 128, E x C = 512 rows of 2h + f:
//     512 x 4 x 384 = 786,432, less the combine's routed rows autograd freed when their product
//     with the gates ran its backward (k h per token): 256 x 4 x 128 = 131,072, so 655,360;
//   dropless, top-2 x 256 = 512 rows, each expert's output still kept: 786,432.
// Summed, the phases would be 131,072 + 262,144 + 786,432 = 1,179,648 (validate --ep 2 measured
// the executor 5.7 % below such a plan).
TEST(MoeModels, Gpt2TinyMoeBackwardWorkingIsTheWiderPhase) {
  const Model dropless = model_from_preset("gpt2-tiny-moe");
  const Model shard = expert_parallel_shard(dropless, {.size = 2});
  EXPECT_EQ(shard.layers[2].activation_bytes(4, 64, 4).backward_working, 131'072 + 655'360);
  EXPECT_EQ(dropless.layers[2].activation_bytes(4, 64, 4).backward_working, 131'072 + 786'432);
  EXPECT_EQ(shard.layers[2].moe->token_released_elements, 2 * 64);
  EXPECT_EQ(dropless.layers[2].moe->token_released_elements, 0);
}

// A MoE model written as a layer list reads back as the same model: its shape carries the experts
// and latent attention, and the layers are rebuilt from it (their routing is no layer-list key).
TEST(MoeModels, LayerListRoundTrip) {
  const Model original = load("DeepSeek-V2-Lite.json");
  Diagnostics diagnostics;
  const Model copy =
      model_from_layers_json(json::parse(model_to_json(original).dump()), diagnostics, "copy");
  EXPECT_EQ(copy.parameter_count(), original.parameter_count());
  EXPECT_EQ(copy.active_parameter_count(), original.active_parameter_count());
  ASSERT_TRUE(copy.shape && copy.shape->moe && copy.shape->mla);
  EXPECT_EQ(*copy.shape->moe, *original.shape->moe);
  EXPECT_EQ(*copy.shape->mla, *original.shape->mla);
  EXPECT_TRUE(copy.layers[2].moe.has_value());
}

}  // namespace
}  // namespace zerolens
