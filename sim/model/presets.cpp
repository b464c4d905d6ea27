// Model presets and the synthetic dense:N model.
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>

#include "sim/core/error.hpp"
#include "sim/model/presets.hpp"

namespace zerolens {
namespace {

TransformerShape gpt2_shape(int layers, std::int64_t hidden, int heads, std::int64_t positions) {
  TransformerShape s;
  s.family = "gpt2";
  s.layers = layers;
  s.hidden = hidden;
  s.heads = heads;
  s.kv_heads = heads;
  s.ffn_hidden = 4 * hidden;
  s.vocab = 50257;
  s.max_positions = positions;
  return s;
}

TransformerShape llama_shape(int layers, std::int64_t hidden, int heads, int kv_heads,
                             std::int64_t ffn, std::int64_t vocab, std::int64_t positions) {
  TransformerShape s;
  s.family = "llama";
  s.layers = layers;
  s.hidden = hidden;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.ffn_hidden = ffn;
  s.vocab = vocab;
  s.max_positions = positions;
  s.learned_positions = false;
  s.tied_embeddings = false;
  s.qkv_bias = s.out_proj_bias = s.mlp_bias = false;
  s.norm = NormKind::RmsNorm;
  s.mlp = MlpKind::SwiGlu;
  s.dropout = 0;
  return s;
}

// BERT and RoBERTa base (their config.json: BertConfig's and RobertaConfig's keys as
// sim/model/hf_encoders.cpp reads them).
TransformerShape bert_shape(const char* family, std::int64_t vocab, std::int64_t positions,
                            std::int64_t token_types) {
  TransformerShape s = gpt2_shape(12, 768, 12, positions);
  s.family = family;
  s.architecture = Architecture::Encoder;
  s.vocab = vocab;
  s.token_types = token_types;
  s.loss_in_fp32 = false;
  return s;
}

// T5 v1.0 (t5-small, t5-base): ReLU feed-forward, tied embeddings, 32 relative position buckets.
TransformerShape t5_shape(int layers, std::int64_t d_model, int heads, std::int64_t d_ff) {
  TransformerShape s = llama_shape(layers, d_model, heads, heads, d_ff, 32128, 512);
  s.family = "t5";
  s.architecture = Architecture::EncoderDecoder;
  s.decoder_layers = layers;
  s.head_dim = 64;
  s.relative_attention_buckets = 32;
  s.tied_embeddings = true;
  s.mlp = MlpKind::Gelu;  // wi, wo
  s.dropout = 0.1;
  s.loss_in_fp32 = false;
  return s;
}

void add_encoder_presets(std::map<std::string, TransformerShape>& t) {
  t["bert-base-uncased"] = bert_shape("bert", 30522, 512, 2);
  t["roberta-base"] = bert_shape("roberta", 50265, 514, 1);
  t["t5-small"] = t5_shape(6, 512, 8, 2048);
  t["t5-base"] = t5_shape(12, 768, 12, 3072);
}

// Shapes from the published configs (Hugging Face config.json of each checkpoint; GPT-3 from
// Brown et al. 2020, Table 2.1).
const std::map<std::string, TransformerShape>& presets() {
  static const std::map<std::string, TransformerShape> table = [] {
    std::map<std::string, TransformerShape> t;
    TransformerShape tiny = gpt2_shape(2, 64, 4, 128);
    tiny.vocab = 256;
    t["gpt2-tiny"] = tiny;
    // gpt2-tiny with DeepSpeed MoE layers (deepspeed/moe/layer.py MoE around GPT-2's MLP): 4
    // experts of GPT-2's MLP, top-2 (TopKGate k=2), in every other block (the second of each
    // pair: sparse_step 2), the others dense.
    TransformerShape tiny_moe = tiny;
    tiny_moe.moe = MoeShape{.experts = 4, .top_k = 2, .expert_ffn = 4 * 64, .sparse_step = 2};
    t["gpt2-tiny-moe"] = tiny_moe;
    t["gpt2-124m"] = gpt2_shape(12, 768, 12, 1024);
    t["gpt2-355m"] = gpt2_shape(24, 1024, 16, 1024);
    t["gpt2-774m"] = gpt2_shape(36, 1280, 20, 1024);
    t["gpt2-1.5b"] = gpt2_shape(48, 1600, 25, 1024);
    t["gpt3-175b"] = gpt2_shape(96, 12288, 96, 2048);
    t["gpt3-175b"].family = "gpt3";
    add_encoder_presets(t);
    t["llama2-7b"] = llama_shape(32, 4096, 32, 32, 11008, 32000, 4096);
    t["llama2-13b"] = llama_shape(40, 5120, 40, 40, 13824, 32000, 4096);
    t["llama2-70b"] = llama_shape(80, 8192, 64, 8, 28672, 32000, 4096);
    t["llama3-8b"] = llama_shape(32, 4096, 32, 8, 14336, 128256, 8192);
    t["llama3-70b"] = llama_shape(80, 8192, 64, 8, 28672, 128256, 8192);
    for (auto& [name, shape] : t) {
      if (shape.family == "llama") shape.family = name.rfind("llama3", 0) == 0 ? "llama3" : "llama2";
    }
    // The families of issue 21, shaped as their config.json files read (tests/data/hf):
    // Mistral-7B-v0.1, Qwen2-7B, Qwen3-8B, Gemma-7B, Gemma-2-2B, Phi-3-mini-4k.
    t["mistral-7b"] = llama_shape(32, 4096, 32, 8, 14336, 32000, 32768);
    t["mistral-7b"].family = "mistral";
    t["qwen2-7b"] = llama_shape(28, 3584, 28, 4, 18944, 152064, 32768);
    t["qwen2-7b"].family = "qwen2";
    t["qwen2-7b"].qkv_bias = true;
    t["qwen3-8b"] = llama_shape(36, 4096, 32, 8, 12288, 151936, 40960);
    t["qwen3-8b"].family = "qwen3";
    t["qwen3-8b"].head_dim = 128;
    t["qwen3-8b"].qk_norm = true;
    for (const char* name : {"gemma-7b", "gemma2-2b"}) {
      const bool second = std::string(name) == "gemma2-2b";
      t[name] = second ? llama_shape(26, 2304, 8, 4, 9216, 256000, 8192)
                       : llama_shape(28, 3072, 16, 16, 24576, 256000, 8192);
      t[name].family = second ? "gemma2" : "gemma";
      t[name].head_dim = 256;
      t[name].tied_embeddings = true;
      t[name].sandwich_norms = second;
    }
    t["phi3-mini"] = llama_shape(32, 3072, 32, 32, 8192, 32064, 4096);
    t["phi3-mini"].family = "phi3";
    return t;
  }();
  return table;
}

constexpr double kDenseMin = 1e5;
constexpr double kDenseMax = 1e15;

std::int64_t block_params(std::int64_t hidden) { return 12 * hidden * hidden + 13 * hidden; }

// "7.5e9" style name that parses back to the same count.
std::string dense_name(std::int64_t count) {
  char text[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*e", digits - 1, double(count));
    if (std::llround(std::strtod(text, nullptr)) == count) break;
  }
  std::string s = text;  // "7.5000e+09" -> "7.5e9"
  const auto e = s.find('e');
  std::string mantissa = s.substr(0, e);
  if (mantissa.find('.') != std::string::npos) {
    while (mantissa.back() == '0') mantissa.pop_back();
    if (mantissa.back() == '.') mantissa.pop_back();
  }
  const int exponent = std::stoi(s.substr(e + 1));
  return "dense:" + mantissa + "e" + std::to_string(exponent);
}

double parse_dense_count(const std::string& text) {
  const std::string where = "dense:" + text;
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw InputError(where, "expected a parameter count such as dense:7.5e9 or dense:350M");
  }
  const std::string suffix = text.substr(used);
  static const std::map<std::string, double> scale = {
      {"", 1}, {"K", 1e3}, {"k", 1e3}, {"M", 1e6}, {"B", 1e9}, {"G", 1e9}, {"T", 1e12}};
  const auto it = scale.find(suffix);
  if (it == scale.end()) throw InputError(where, "unknown suffix '" + suffix + "' (use K, M, B or T)");
  return value * it->second;
}

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, shape] : presets()) names.push_back(name);
  return names;
}

// The names people type for the presets' models: Hugging Face ids (base and chat/instruct
// checkpoints share the shape) and GPT-2's short names. Lower case: names match in any case.
const std::map<std::string, std::string>& preset_aliases() {
  static const std::map<std::string, std::string> aliases = {
      {"gpt2", "gpt2-124m"},
      {"gpt2-medium", "gpt2-355m"},
      {"gpt2-large", "gpt2-774m"},
      {"gpt2-xl", "gpt2-1.5b"},
      {"google-bert/bert-base-uncased", "bert-base-uncased"},
      {"facebookai/roberta-base", "roberta-base"},
      {"google-t5/t5-small", "t5-small"},
      {"google-t5/t5-base", "t5-base"},
      {"openai-community/gpt2", "gpt2-124m"},
      {"openai-community/gpt2-medium", "gpt2-355m"},
      {"openai-community/gpt2-large", "gpt2-774m"},
      {"openai-community/gpt2-xl", "gpt2-1.5b"},
      {"meta-llama/llama-2-7b-hf", "llama2-7b"},
      {"meta-llama/llama-2-7b-chat-hf", "llama2-7b"},
      {"meta-llama/llama-2-13b-hf", "llama2-13b"},
      {"meta-llama/llama-2-13b-chat-hf", "llama2-13b"},
      {"meta-llama/llama-2-70b-hf", "llama2-70b"},
      {"meta-llama/llama-2-70b-chat-hf", "llama2-70b"},
      {"meta-llama/meta-llama-3-8b", "llama3-8b"},
      {"meta-llama/meta-llama-3-8b-instruct", "llama3-8b"},
      {"meta-llama/meta-llama-3-70b", "llama3-70b"},
      {"meta-llama/meta-llama-3-70b-instruct", "llama3-70b"},
      {"mistralai/mistral-7b-v0.1", "mistral-7b"},
      {"mistralai/mistral-7b-instruct-v0.1", "mistral-7b"},
      {"qwen/qwen2-7b", "qwen2-7b"},
      {"qwen/qwen2-7b-instruct", "qwen2-7b"},
      {"qwen/qwen3-8b", "qwen3-8b"},
      {"google/gemma-7b", "gemma-7b"},
      {"google/gemma-7b-it", "gemma-7b"},
      {"google/gemma-2-2b", "gemma2-2b"},
      {"google/gemma-2-2b-it", "gemma2-2b"},
      {"microsoft/phi-3-mini-4k-instruct", "phi3-mini"},
  };
  return aliases;
}

std::string lower_case(std::string text) {
  for (char& c : text) c = char(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

[[noreturn]] void unknown_preset(const std::string& name) {
  std::vector<std::string> known = model_preset_names();
  for (const auto& [alias, preset] : preset_aliases()) known.push_back(alias);
  const std::string hint = closest_name(lower_case(name), known);
  const std::string hub =
      name.find('/') != std::string::npos
          ? "; for a Hugging Face model zerolens has no preset of, download its config.json and "
            "pass --hf-config FILE (zerolens does not reach the network)"
          : "";
  throw InputError("--model",
                   "unknown model '" + name + "'" +
                       (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
                       "; presets: gpt2-124m, gpt2-355m, gpt2-774m, gpt2-1.5b, gpt3-175b, "
                       "llama2-7b, llama2-13b, llama2-70b, llama3-8b, llama3-70b, "
                       "mistral-7b, qwen2-7b, qwen3-8b, gemma-7b, gemma2-2b, phi3-mini, "
                       "bert-base-uncased, roberta-base, t5-small, t5-base, "
                       "gpt2-tiny, gpt2-tiny-moe, dense:<N>, or a Hugging Face id of one of them" +
                       hub);
}

Model model_from_preset(const std::string& name) {
  if (name.rfind("dense:", 0) == 0) return model_from_dense(parse_dense_count(name.substr(6)));
  std::string key = lower_case(name);
  if (const auto alias = preset_aliases().find(key); alias != preset_aliases().end())
    key = alias->second;
  const auto it = presets().find(key);
  if (it == presets().end()) unknown_preset(name);
  Model model = build_transformer(key, it->second);
  model.source = "preset";
  return model;
}

// A GPT-style model with exactly N parameters: hidden ~ (N * 128 / 12)^(1/3) rounded to 64 (the
// GPT-3 aspect ratio of 128 hidden units per layer), as many blocks as fit, and the remainder in
// the (tied) vocabulary embedding plus one small extra tensor.
Model model_from_dense(double parameter_count) {
  if (!std::isfinite(parameter_count) || parameter_count < kDenseMin || parameter_count > kDenseMax) {
    throw InputError("dense", "parameter count must be between 1e5 and 1e15");
  }
  const std::int64_t n = std::llround(parameter_count);
  std::int64_t hidden = std::max<std::int64_t>(64, std::llround(std::cbrt(double(n) * 128 / 12) / 64) * 64);
  while (hidden > 64 && block_params(hidden) + 3 * hidden > n) hidden -= 64;
  TransformerShape s = gpt2_shape(1, hidden, int(std::max<std::int64_t>(1, hidden / 64)), 2048);
  s.family = "dense";
  s.learned_positions = false;
  const std::int64_t norm = 2 * hidden;
  s.layers = int(std::max<std::int64_t>(1, (n - norm - hidden) / block_params(hidden)));
  const std::int64_t remainder = n - s.layers * block_params(hidden) - norm;
  s.vocab = remainder / hidden;
  s.extra_params = remainder % hidden;
  Model model = build_transformer(dense_name(n), s);
  model.source = "dense";
  return model;
}

}  // namespace zerolens
