// BERT, RoBERTa, T5 and mT5 (issue 21) from their config.json files (tests/data/hf, as published in
// the model repositories): parameter counts against the model cards and a hand formula, PEFT's LoRA
// counts, a T5 decoder block's activations and FLOPs worked by hand, and the two sequences.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "sim/model/layers_json.hpp"
#include "sim/model/lora.hpp"
#include "sim/model/model_io.hpp"
#include "sim/model/presets.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

std::string data(const std::string& name) {
  return std::string(ZEROLENS_TEST_DATA) + "/" + name;
}

Model load(const std::string& file) {
  Diagnostics diagnostics;
  return load_model(data("hf/" + file), diagnostics);
}

// BERT's model card counts BertModel with its pooler: embeddings (word v x h, positions p x h,
// token types t x h, LayerNorm 2h), 12 post-LN blocks of 4(h^2 + h) + 2(hf) + f + h + 4h, and the
// pooler h^2 + h. The MLM model (what run_mlm.py trains) has no pooler but the head's transform
// (h^2 + h + 2h) and its decoder's bias (v), the decoder tied to the word embeddings.
// bert-base-uncased: 109,482,240 on its card; roberta-base (v 50265, p 514, t 1): 124,645,632.
TEST(EncoderModels, BertAndRobertaCountsAsTheModelCards) {
  const auto block = [](Elements h, Elements f) {
    return 4 * (h * h + h) + 2 * h * f + f + h + 4 * h;
  };
  const auto backbone = [&](Elements v, Elements p, Elements t) {
    return v * 768 + p * 768 + t * 768 + 2 * 768 + 12 * block(768, 3072) + 768 * 768 + 768;
  };
  const auto mlm = [&](Elements v, Elements p, Elements t) {
    return backbone(v, p, t) - (768 * 768 + 768) + (768 * 768 + 768 + 2 * 768) + v;
  };
  EXPECT_EQ(backbone(30522, 512, 2), 109'482'240);
  EXPECT_EQ(backbone(50265, 514, 1), 124'645'632);
  EXPECT_EQ(load("bert-base-uncased.json").parameter_count(), mlm(30522, 512, 2));
  EXPECT_EQ(load("roberta-base.json").parameter_count(), mlm(50265, 514, 1));
  const Model bert = load("bert-base-uncased.json");
  EXPECT_EQ(bert.layers.size(), 1 + 12 + 2u);
  EXPECT_EQ(bert.layers.back().shares_params_of, 0);  // the decoder is the word embeddings
  EXPECT_EQ(bert.shape->architecture, Architecture::Encoder);
}

// T5 per stack: n blocks of 4 d i (q, k, v, o; i = heads x d_kv) + m d f (m = 2, or 3 gated) + 2d
// (norms), a decoder block also the cross-attention's 4 d i + d; one relative-bias table of 32 x
// heads in each stack's first block, a final norm each; the shared embedding v x d, and the head's
// own v x d when untied. t5-small and t5-base match their cards (60,506,624 and 222,903,552);
// t5-3b and t5-11b the formula and their pages' 2.85B and 11.3B; mT5-small (gated, untied) 300M;
// flan-t5-base 248M.
TEST(EncoderModels, T5CountsAsTheModelCards) {
  const auto t5 = [](Elements d, Elements inner, Elements f, Elements heads, Elements layers,
                     Elements vocab, bool gated, bool tied) {
    const Elements m = gated ? 3 : 2;
    const Elements encoder = layers * (4 * d * inner + m * d * f + 2 * d) + 32 * heads + d;
    const Elements decoder = layers * (8 * d * inner + m * d * f + 3 * d) + 32 * heads + d;
    return vocab * d * (tied ? 1 : 2) + encoder + decoder;
  };
  const std::tuple<const char*, Elements, double> cases[] = {
      {"t5-small.json", t5(512, 512, 2048, 8, 6, 32128, false, true), 60'506'624},
      {"t5-base.json", t5(768, 768, 3072, 12, 12, 32128, false, true), 222'903'552},
      {"t5-3b.json", t5(1024, 4096, 16384, 32, 24, 32128, false, true), 2.85e9},
      {"t5-11b.json", t5(1024, 16384, 65536, 128, 24, 32128, false, true), 11.3e9},
      {"mt5-small.json", t5(512, 384, 1024, 6, 8, 250112, true, false), 300e6},
      {"flan-t5-base.json", t5(768, 768, 2048, 12, 12, 32128, true, false), 248e6},
  };
  for (const auto& [file, formula, card] : cases) {
    const Elements count = load(file).parameter_count();
    EXPECT_EQ(count, formula) << file;
    EXPECT_NEAR(double(count), card, card * 0.002) << file;
  }
  EXPECT_EQ(load("t5-small.json").parameter_count(), 60'506'624);
  EXPECT_EQ(load("t5-base.json").parameter_count(), 222'903'552);
}

// PEFT's printouts: mt0-large with r=8 on q, v "trainable params: 2359296 || all params:
// 1231940608" (its README); t5-base "884,736 || 223,788,288". q and v name the self-attention's
// and, in decoder blocks, the cross-attention's: encoder 24 x 2 adapters, decoder 24 x 4, each
// 8 x (1024 + 1024); BERT's default query, value: 12 x 2 x 8 x 1536.
TEST(EncoderModels, PeftLoraCounts) {
  const auto lora = [](const Model& model, int rank, std::vector<std::string> targets = {}) {
    return with_lora(model, LoraConfig{.rank = rank, .targets = std::move(targets)});
  };
  const Model mt0 = lora(load("mt0-large.json"), 8);
  EXPECT_EQ(mt0.trainable_parameter_count(), 24 * 2 * 8 * 2048 + 24 * 4 * 8 * 2048);
  EXPECT_EQ(mt0.trainable_parameter_count(), 2'359'296);
  EXPECT_EQ(mt0.parameter_count(), 1'231'940'608);
  const Model t5 = lora(load("t5-base.json"), 8);
  EXPECT_EQ(t5.trainable_parameter_count(), 884'736);
  EXPECT_EQ(t5.parameter_count(), 223'788'288);
  EXPECT_EQ(lora(load("bert-base-uncased.json"), 8).trainable_parameter_count(), 12 * 2 * 8 * 1536);
  EXPECT_EQ(lora(load("bert-base-uncased.json"), 4, {"output.dense"}).trainable_parameter_count(),
            12 * 4 * ((768 + 768) + (3072 + 768)));
  EXPECT_EQ(lora(load("flan-t5-base.json"), 4, {"wi_0", "wo"}).trainable_parameter_count(),
            24 * 4 * ((768 + 2048) + (2048 + 768)));
  EXPECT_THROW(lora(load("t5-small.json"), 8, {"wi_0"}), InputError);  // t5 v1.0 has wi
}

// t5-small's decoder block (d = i = 512, 8 heads, f = 2048, dropout 0.1, eager), per target token:
// the block the decoders share, 4d + (q + k) + v + o-input + 2f (ReLU's output and the dropout's,
// wo's input) = 2,048 + 6,144 = 8,192 elements, masks 2d + f (the FF's own dropout) = 3,072 bytes;
// T5's fp32 softmax: per position 8 elements (the dropout's output), 32 bytes and 8 mask bytes; the
// cross-attention adds its norm's input and output, q and o's input (2d + 2i = 2,048 elements), a
// d mask, per source position 8 elements, 32 bytes and 8 mask bytes, and per source token its
// keys and values (2i = 1,024 elements). With b = 1, S = 512, T = 128, 2-byte activations:
//   128 x (2 x 10,240 + 3,584 + 128 x (16 + 8 + 32) + 512 x (16 + 8 + 32)) + 512 x 2 x 1,024
//   = 128 x 59,904 + 1,048,576 = 8,716,288 bytes.
// FLOPs per target token 2(d(q + 2k) + o d + 2 d f) + 2 x 2 d i (cross q, o) = 7,340,032, per
// source token 2 x 2 d i (cross k, v) = 1,048,576, per position 4i = 2,048 (self and cross):
//   128 x (7,340,032 + 128 x 2,048 + 512 x 2,048) + 512 x 1,048,576 = 1,644,167,168.
TEST(EncoderModels, T5DecoderBlockWorkedByHand) {
  const Model t5 = load("t5-small.json");
  const Layer& decoder = t5.layers[1 + 6 + 1 + 1];
  ASSERT_EQ(decoder.name, "decoder.0");
  EXPECT_TRUE(decoder.on_target);
  EXPECT_DOUBLE_EQ(decoder.activations.elements, 10'240);
  EXPECT_DOUBLE_EQ(decoder.activations.mask_bytes, 3'584);
  EXPECT_DOUBLE_EQ(decoder.activations.source_elements, 1'024);
  EXPECT_EQ(decoder.activation_bytes(1, 512, 2, 128).stored, 8'716'288);
  EXPECT_DOUBLE_EQ(decoder.forward_flops(1, 512, 128), 1'644'167'168.0);
  // The encoder's block runs over the source whatever the target.
  const Layer& encoder = t5.layers[1];
  EXPECT_FALSE(encoder.on_target);
  EXPECT_EQ(encoder.activation_bytes(1, 512, 2, 128).stored,
            encoder.activation_bytes(1, 512, 2, 512).stored);
  EXPECT_DOUBLE_EQ(encoder.activations.elements, 8'192);
  // Its relative position table: in the first block of each stack only.
  const auto has_bias = [](const Layer& layer) {
    for (const TensorSpec& t : layer.params)
      if (t.name.find("relative_attention_bias") != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has_bias(t5.layers[1]));
  EXPECT_FALSE(has_bias(t5.layers[2]));
  EXPECT_TRUE(has_bias(decoder));
}

// The step's two sequences: the decoder's layers (and the head's logits) follow --target-seq-len,
// the encoder's --seq-len; a shorter target plans less.
TEST(EncoderModels, TargetLengthReachesTheSchedule) {
  TrainingConfig config = testing::mixed_adam(2, Precision::Bf16);
  config.seq_len = 512;
  config.target_seq_len = 128;
  const Plan shorter = testing::plan_of(load("t5-small.json"), config, 2);
  EXPECT_EQ(shorter.schedule.context.target_seq_len, 128);
  config.target_seq_len.reset();
  const Plan same = testing::plan_of(load("t5-small.json"), config, 2);
  EXPECT_EQ(same.schedule.context.target_seq_len, 512);
  EXPECT_LT(shorter.gpu.allocated, same.gpu.allocated);
  double flops = 0;
  for (const Op& op : shorter.schedule.ops) {
    if (op.kind == OpKind::Forward) flops += op.flops;
  }
  EXPECT_DOUBLE_EQ(flops, load("t5-small.json").forward_flops_per_step(1, 512, 128));
  // A decoder-only model has one sequence.
  config.target_seq_len = 128;
  try {
    testing::plan_of(testing::small_transformer(2, 64), config, 2);
    FAIL() << "a target length was taken by a decoder-only model";
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "--target-seq-len");
  }
}

TEST(EncoderModels, RefusalsNameTheKey) {
  const auto refused = [](const std::string& file, const char* key, const nlohmann::json& value) {
    std::ifstream in(data("hf/" + file));
    nlohmann::json config = nlohmann::json::parse(in);
    config[key] = value;
    Diagnostics diagnostics;
    try {
      model_from_hf_config(config, diagnostics, "config.json");
    } catch (const InputError& error) {
      return error.where();
    }
    return std::string();
  };
  EXPECT_EQ(refused("bert-base-uncased.json", "position_embedding_type", "relative_key"),
            "config.json.position_embedding_type");
  EXPECT_EQ(refused("t5-small.json", "feed_forward_proj", "swish"),
            "config.json.feed_forward_proj");
  EXPECT_EQ(refused("t5-small.json", "num_heads", 0), "config.json.num_heads");
  EXPECT_EQ(refused("t5-small.json", "d_model", nullptr), "config.json.d_model");
  EXPECT_EQ(refused("bert-base-uncased.json", "num_attention_heads", 7),
            "config.json.num_attention_heads");
  EXPECT_THROW(with_attention(load("t5-small.json"), AttentionImpl::Flash), InputError);
  EXPECT_THROW(tensor_parallel_shard(load("t5-small.json"), TensorParallelism{.size = 2}),
               InputError);
  EXPECT_THROW(pipeline_stage_model(load("bert-base-uncased.json"), {.size = 2}, 0), InputError);
}

// The presets are their config.json files (the same layers, tensors and terms).
TEST(EncoderModels, PresetsAreTheirConfigs) {
  const std::pair<const char*, const char*> pairs[] = {
      {"bert-base-uncased", "bert-base-uncased.json"},
      {"roberta-base", "roberta-base.json"},
      {"t5-small", "t5-small.json"},
      {"google-t5/t5-base", "t5-base.json"}};
  for (const auto& [preset, file] : pairs) {
    auto from_preset = model_to_json(model_from_preset(preset));
    auto from_config = model_to_json(load(file));
    from_preset.erase("name");
    from_config.erase("name");
    EXPECT_EQ(from_preset, from_config) << preset;
  }
}

// The layer list written for T5 (a trace's model) reads back as the same model.
TEST(EncoderModels, ModelJsonRoundTrip) {
  for (const char* file : {"t5-small.json", "bert-base-uncased.json"}) {
    const Model model = load(file);
    Diagnostics diagnostics;
    const Model back = model_from_layers_json(model_to_json(model), diagnostics, "m.json");
    EXPECT_TRUE(diagnostics.warnings.empty()) << file;
    ASSERT_TRUE(back.shape) << file;
    EXPECT_EQ(back.shape->architecture, model.shape->architecture) << file;
    EXPECT_EQ(back.parameter_count(), model.parameter_count()) << file;
    EXPECT_EQ(back.has_target_sequence(), model.has_target_sequence()) << file;
    EXPECT_EQ(back.layers.back().activation_bytes(2, 64, 2, 16).stored,
              model.layers.back().activation_bytes(2, 64, 2, 16).stored)
        << file;
  }
}

}  // namespace
}  // namespace zerolens
