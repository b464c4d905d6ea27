// Model presets and the synthetic dense:N model.
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

// Shapes from the published configs (Hugging Face config.json of each checkpoint; GPT-3 from
// Brown et al. 2020, Table 2.1).
const std::map<std::string, TransformerShape>& presets() {
  static const std::map<std::string, TransformerShape> table = [] {
    std::map<std::string, TransformerShape> t;
    TransformerShape tiny = gpt2_shape(2, 64, 4, 128);
    tiny.vocab = 256;
    t["gpt2-tiny"] = tiny;
    t["gpt2-124m"] = gpt2_shape(12, 768, 12, 1024);
    t["gpt2-355m"] = gpt2_shape(24, 1024, 16, 1024);
    t["gpt2-774m"] = gpt2_shape(36, 1280, 20, 1024);
    t["gpt2-1.5b"] = gpt2_shape(48, 1600, 25, 1024);
    t["gpt3-175b"] = gpt2_shape(96, 12288, 96, 2048);
    t["gpt3-175b"].family = "gpt3";
    t["llama2-7b"] = llama_shape(32, 4096, 32, 32, 11008, 32000, 4096);
    t["llama2-13b"] = llama_shape(40, 5120, 40, 40, 13824, 32000, 4096);
    t["llama2-70b"] = llama_shape(80, 8192, 64, 8, 28672, 32000, 4096);
    t["llama3-8b"] = llama_shape(32, 4096, 32, 8, 14336, 128256, 8192);
    t["llama3-70b"] = llama_shape(80, 8192, 64, 8, 28672, 128256, 8192);
    for (auto& [name, shape] : t) {
      if (shape.family == "llama") shape.family = name.rfind("llama3", 0) == 0 ? "llama3" : "llama2";
    }
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

Model model_from_preset(const std::string& name) {
  if (name.rfind("dense:", 0) == 0) return model_from_dense(parse_dense_count(name.substr(6)));
  const auto it = presets().find(name);
  if (it == presets().end()) {
    const std::string hint = closest_name(name, model_preset_names());
    throw InputError("--model", "unknown model preset '" + name + "'" +
                                    (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
                                    "; presets: gpt2-124m, gpt2-355m, gpt2-774m, gpt2-1.5b, gpt3-175b, "
                                    "llama2-7b, llama2-13b, llama2-70b, llama3-8b, llama3-70b, "
                                    "gpt2-tiny, dense:<N>");
  }
  Model model = build_transformer(name, it->second);
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
