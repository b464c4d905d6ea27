// BERT, RoBERTa, T5 and mT5 config.json files (their transformers configuration classes' keys and
// defaults: BertConfig, RobertaConfig, T5Config, MT5Config).
#include "sim/model/hf_encoders.hpp"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "sim/core/json_read.hpp"

namespace zerolens {
namespace {

using nlohmann::json;
using namespace json_read;

constexpr std::int64_t kMaxDim = std::int64_t(1) << 40;

struct Reader {
  const json& config;
  const std::string& where;

  std::int64_t required(const char* key) const {
    const json* value = member(config, key);
    if (!value) throw InputError(join_key(where, key), "missing (required for this model type)");
    return as_int(*value, join_key(where, key), 1, kMaxDim);
  }
  std::int64_t optional(const char* key, std::int64_t fallback, std::int64_t low = 1) const {
    const json* value = member(config, key);
    return value ? as_int(*value, join_key(where, key), low, kMaxDim) : fallback;
  }
  bool flag(const char* key, bool fallback) const {
    const json* value = member(config, key);
    return value ? as_bool(*value, join_key(where, key)) : fallback;
  }
  double probability(const char* key, double fallback) const {
    const json* value = member(config, key);
    return value ? as_double(*value, join_key(where, key), 0, 0.999) : fallback;
  }
  std::string text(const char* key, const std::string& fallback) const {
    const json* value = member(config, key);
    return value ? as_string(*value, join_key(where, key)) : fallback;
  }
  int count(const char* key, std::int64_t value) const {
    if (value > 1'000'000) throw InputError(join_key(where, key), "is implausibly large");
    return int(value);
  }
};

// BertConfig / RobertaConfig: a post-LN encoder with learned positions, token types, biases
// everywhere and a GELU MLP.
TransformerShape bert_shape(const Reader& r, const std::string& type, Diagnostics& diagnostics) {
  TransformerShape s;
  s.family = type;
  s.architecture = Architecture::Encoder;
  s.layers = r.count("num_hidden_layers", r.required("num_hidden_layers"));
  s.hidden = r.required("hidden_size");
  s.heads = r.count("num_attention_heads", r.required("num_attention_heads"));
  s.kv_heads = s.heads;
  s.ffn_hidden = r.required("intermediate_size");
  s.vocab = r.required("vocab_size");
  s.max_positions = r.optional("max_position_embeddings", 512);
  s.token_types = r.optional("type_vocab_size", 2, 0);
  s.learned_positions = true;
  s.tied_embeddings = r.flag("tie_word_embeddings", true);
  s.qkv_bias = s.out_proj_bias = s.mlp_bias = true;
  s.norm = NormKind::LayerNorm;
  s.mlp = MlpKind::Gelu;
  s.dropout = r.probability("hidden_dropout_prob", 0.1);
  s.loss_in_fp32 = false;
  const std::string positions = r.text("position_embedding_type", "absolute");
  if (positions != "absolute") {
    throw InputError(join_key(r.where, "position_embedding_type"),
                     "'" + positions + "' is not modelled (its distance embeddings add " +
                         "parameters); only 'absolute' is");
  }
  if (r.flag("is_decoder", false) || r.flag("add_cross_attention", false)) {
    throw InputError(join_key(r.where, "is_decoder"),
                     "a BERT decoder (is_decoder, add_cross_attention) is not modelled; the "
                     "masked-LM encoder is");
  }
  const std::string act = r.text("hidden_act", "gelu");
  if (act != "gelu") {
    diagnostics.warn(join_key(r.where, "hidden_act"),
                     "'" + act + "' planned as gelu (the same tensors kept)");
  }
  return s;
}

// T5Config / MT5Config: an encoder and a decoder of RMS-normed blocks without biases, relative
// position buckets instead of position embeddings, a ReLU (T5) or gated-GELU (T5 v1.1, mT5)
// feed-forward; tied input and output embeddings unless tie_word_embeddings is false.
TransformerShape t5_shape(const Reader& r, const std::string& type) {
  TransformerShape s;
  s.family = type;
  s.architecture = Architecture::EncoderDecoder;
  s.layers = r.count("num_layers", r.required("num_layers"));
  s.decoder_layers = r.count("num_decoder_layers", r.optional("num_decoder_layers", s.layers));
  s.hidden = r.required("d_model");
  s.heads = r.count("num_heads", r.required("num_heads"));
  s.kv_heads = s.heads;
  s.head_dim = r.required("d_kv");
  s.ffn_hidden = r.required("d_ff");
  s.vocab = r.required("vocab_size");
  s.relative_attention_buckets = r.optional("relative_attention_num_buckets", 32);
  s.max_positions = r.optional("n_positions", 512);  // the default sequence; no position table
  s.learned_positions = false;
  s.tied_embeddings = r.flag("tie_word_embeddings", true);
  s.qkv_bias = s.out_proj_bias = s.mlp_bias = false;
  s.norm = NormKind::RmsNorm;
  s.dropout = r.probability("dropout_rate", 0.1);
  s.loss_in_fp32 = false;
  const std::string ff = r.text("feed_forward_proj", "relu");
  const bool gated = ff.rfind("gated-", 0) == 0;
  const std::string act = gated ? ff.substr(6) : ff;
  if (act != "relu" && act != "gelu" && act != "gelu_new" && act != "silu") {
    throw InputError(join_key(r.where, "feed_forward_proj"),
                     "unknown '" + ff + "' (expected relu, gelu, gated-gelu or gated-silu)");
  }
  s.mlp = gated ? MlpKind::SwiGlu : MlpKind::Gelu;  // wi_0, wi_1, wo: the gated MLP's tensors
  return s;
}

// Shape errors under the config's own key names.
void validate_with_keys(const TransformerShape& shape, const std::string& where, bool t5) {
  static const std::map<std::string, std::pair<const char*, const char*>> names = {
      {"layers", {"num_hidden_layers", "num_layers"}},
      {"hidden", {"hidden_size", "d_model"}},
      {"heads", {"num_attention_heads", "num_heads"}},
      {"kv_heads", {"num_attention_heads", "num_heads"}},
      {"head_dim", {"hidden_size", "d_kv"}},
      {"ffn_hidden", {"intermediate_size", "d_ff"}},
      {"vocab", {"vocab_size", "vocab_size"}},
      {"max_positions", {"max_position_embeddings", "n_positions"}},
      {"token_types", {"type_vocab_size", "type_vocab_size"}},
      {"decoder_layers", {"num_decoder_layers", "num_decoder_layers"}},
      {"relative_attention_buckets",
       {"relative_attention_num_buckets", "relative_attention_num_buckets"}},
      {"dropout", {"hidden_dropout_prob", "dropout_rate"}}};
  try {
    shape.validate("");
  } catch (const InputError& error) {
    const auto it = names.find(error.where());
    const std::string key =
        it == names.end() ? error.where() : (t5 ? it->second.second : it->second.first);
    const std::string why = std::string(error.what()).substr(error.where().size() + 2);
    throw InputError(join_key(where, key), why);
  }
}

}  // namespace

const std::vector<std::string>& encoder_families() {
  static const std::vector<std::string> families = {"bert", "roberta", "t5", "mt5"};
  return families;
}

std::optional<TransformerShape> encoder_shape_from_hf(const json& config, const std::string& where,
                                                      const std::string& type,
                                                      Diagnostics& diagnostics) {
  const auto& families = encoder_families();
  if (std::find(families.begin(), families.end(), type) == families.end()) return std::nullopt;
  const Reader reader{config, where};
  const bool t5 = type == "t5" || type == "mt5";
  TransformerShape shape = t5 ? t5_shape(reader, type) : bert_shape(reader, type, diagnostics);
  validate_with_keys(shape, where, t5);
  return shape;
}

}  // namespace zerolens
