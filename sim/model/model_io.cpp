#include "sim/model/model_io.hpp"

#include <algorithm>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "sim/core/json_read.hpp"
#include "sim/model/hf_encoders.hpp"
#include "sim/model/layers_json.hpp"
#include "sim/model/moe_io.hpp"
#include "sim/model/presets.hpp"

namespace zerolens {
namespace {

using nlohmann::json;
using namespace json_read;

constexpr std::int64_t kMaxDim = std::int64_t(1) << 40;

std::int64_t required_int(const json& config, const std::string& key, const std::string& where) {
  const json* value = member(config, key);
  if (!value) throw InputError(join_key(where, key), "missing (required for this model type)");
  return as_int(*value, join_key(where, key), 1, kMaxDim);
}

std::int64_t optional_int(const json& config, const std::string& key, const std::string& where,
                          std::int64_t fallback) {
  const json* value = member(config, key);
  return value ? as_int(*value, join_key(where, key), 1, kMaxDim) : fallback;
}

bool optional_bool(const json& config, const std::string& key, const std::string& where, bool fallback) {
  const json* value = member(config, key);
  return value ? as_bool(*value, join_key(where, key)) : fallback;
}

int as_count(std::int64_t value, const std::string& where) {
  if (value > 1'000'000) throw InputError(where, "is implausibly large");
  return int(value);
}

TransformerShape gpt2_from_hf(const json& c, const std::string& where) {
  TransformerShape s;
  s.family = "gpt2";
  s.layers = as_count(required_int(c, "n_layer", where), join_key(where, "n_layer"));
  s.hidden = required_int(c, "n_embd", where);
  s.heads = as_count(required_int(c, "n_head", where), join_key(where, "n_head"));
  s.kv_heads = s.heads;
  s.ffn_hidden = optional_int(c, "n_inner", where, 4 * s.hidden);
  s.vocab = required_int(c, "vocab_size", where);
  s.max_positions = optional_int(c, "n_positions", where, 1024);
  s.tied_embeddings = optional_bool(c, "tie_word_embeddings", where, true);
  const json* dropout = member(c, "resid_pdrop");
  s.dropout = dropout ? as_double(*dropout, join_key(where, "resid_pdrop"), 0, 0.999) : 0.1;
  return s;
}

TransformerShape llama_from_hf(const json& c, const std::string& where, const std::string& type) {
  TransformerShape s;
  s.family = type;
  s.layers = as_count(required_int(c, "num_hidden_layers", where), join_key(where, "num_hidden_layers"));
  s.hidden = required_int(c, "hidden_size", where);
  s.heads = as_count(required_int(c, "num_attention_heads", where), join_key(where, "num_attention_heads"));
  s.kv_heads = as_count(optional_int(c, "num_key_value_heads", where, s.heads), join_key(where, "num_key_value_heads"));
  s.head_dim = optional_int(c, "head_dim", where, 0);
  s.ffn_hidden = required_int(c, "intermediate_size", where);
  s.vocab = required_int(c, "vocab_size", where);
  s.max_positions = optional_int(c, "max_position_embeddings", where, 2048);
  s.learned_positions = false;
  s.tied_embeddings = optional_bool(c, "tie_word_embeddings", where, false);
  const bool attention_bias = optional_bool(c, "attention_bias", where, false);
  s.qkv_bias = optional_bool(c, "qkv_bias", where, attention_bias);  // Qwen2-style configs
  s.out_proj_bias = attention_bias;
  s.mlp_bias = optional_bool(c, "mlp_bias", where, false);
  s.norm = NormKind::RmsNorm;
  s.mlp = MlpKind::SwiGlu;
  const json* dropout = member(c, "attention_dropout");
  s.dropout = dropout ? as_double(*dropout, join_key(where, "attention_dropout"), 0, 0.999) : 0;
  return s;
}

// The decoder families built like LLaMA (RMSNorm, gated MLP, rotary positions), with what each
// changes, from its Hugging Face modeling file: Qwen2 biases q/k/v (modeling_qwen2.py: bias=True,
// with no config key), Qwen3 norms q and k per head, Gemma ties the embeddings and defaults to
// 256-wide heads (GemmaConfig), Gemma 2 adds the post-attention and post-feedforward norms, Gemma 3
// both. Phi-3 fuses qkv_proj and gate_up_proj: the same parameters as separate projections.
const std::vector<std::string>& llama_like_families() {
  static const std::vector<std::string> families = {"llama", "mistral", "qwen2",       "qwen3",
                                                    "gemma", "gemma2",  "gemma3_text", "phi3"};
  return families;
}

TransformerShape llama_like_from_hf(const json& c, const std::string& where,
                                    const std::string& type, Diagnostics& diagnostics) {
  const bool gemma = type.rfind("gemma", 0) == 0;
  TransformerShape s = llama_from_hf(c, where, type);
  if (type == "qwen2" && !member(c, "qkv_bias") && !member(c, "attention_bias")) s.qkv_bias = true;
  if (gemma) {
    s.tied_embeddings = optional_bool(c, "tie_word_embeddings", where, true);
    s.head_dim = optional_int(c, "head_dim", where, 256);
  }
  if (type == "qwen3" && !member(c, "head_dim")) s.head_dim = 128;  // Qwen3Config's default
  s.qk_norm = type == "qwen3" || type == "gemma3_text";
  s.sandwich_norms = type == "gemma2" || type == "gemma3_text";
  for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping"}) {
    const json* cap = member(c, key);
    if (cap && !cap->is_null()) {
      diagnostics.warn(join_key(where, key),
                       "ignored: the soft-capped logits' extra activations are not modelled");
    }
  }
  const json* window = member(c, "sliding_window");
  const json* use_window = member(c, "use_sliding_window");
  const bool windowed = window && !window->is_null() &&
                        !(use_window && use_window->is_boolean() && !use_window->get<bool>());
  if (windowed) {
    diagnostics.warn(join_key(where, "sliding_window"),
                     "ignored: attention memory assumes full causal attention");
  }
  return s;
}

// Gemma3TextConfig's defaults (transformers' configuration_gemma3.py) for the keys a published
// config may leave out: google/gemma-3-4b-it's text_config names only hidden_size,
// intermediate_size, num_hidden_layers, rope_scaling and sliding_window.
json with_gemma3_text_defaults(json c) {
  static const json defaults = {{"vocab_size", 262208},
                                {"hidden_size", 2304},
                                {"intermediate_size", 9216},
                                {"num_hidden_layers", 26},
                                {"num_attention_heads", 8},
                                {"num_key_value_heads", 4},
                                {"head_dim", 256},
                                {"max_position_embeddings", 131072},
                                {"tie_word_embeddings", true},
                                {"attention_bias", false},
                                {"sliding_window", 4096}};
  for (const auto& [key, value] : defaults.items())
    if (!c.contains(key)) c[key] = value;
  return c;
}

// Gemma 3's vision tower and projector (Gemma3ForConditionalGeneration: a SigLIP vision model,
// modeling_siglip.py, and Gemma3MultiModalProjector), counted from "vision_config" with
// SiglipVisionConfig's defaults: a patch convolution [h, c, p, p] with bias, a position embedding
// of (image / patch)^2 positions, per layer two LayerNorms (weight and bias), q/k/v/out [h, h]
// with biases and an MLP fc1 [f, h] + f, fc2 [h, f] + h, a final LayerNorm; the projector's
// mm_input_projection_weight [h, text hidden] and its RMSNorm's h weights.
Elements gemma3_vision_parameters(const json& v, const std::string& where,
                                  std::int64_t text_hidden) {
  as_object(v, where);
  // Bounds far beyond any vision tower keep the count inside 64 bits.
  const auto read = [&](const char* key, std::int64_t fallback, std::int64_t most) {
    const json* value = member(v, key);
    return value ? as_int(*value, join_key(where, key), 1, most) : fallback;
  };
  const Elements h = read("hidden_size", 768, 1 << 20), f = read("intermediate_size", 3072, 1 << 20);
  const Elements layers = read("num_hidden_layers", 12, 1 << 12);
  const Elements channels = read("num_channels", 3, 1 << 10);
  const Elements image = read("image_size", 224, 1 << 16), patch = read("patch_size", 16, 1 << 16);
  if (image % patch != 0)
    throw InputError(join_key(where, "image_size"), "must be a multiple of patch_size");
  const Elements positions = (image / patch) * (image / patch);
  const Elements block = 2 * 2 * h + 4 * (h * h + h) + (f * h + f) + (h * f + h);
  const Elements tower = channels * patch * patch * h + h + positions * h + layers * block + 2 * h;
  return tower + checked_mul(h, text_hidden) + h;
}

// A multimodal Gemma 3 config (model_type "gemma3"): the language model is the gemma3_text stack
// under "text_config", which is what zerolens plans; the vision tower is left out (its
// activations and compute depend on the images of a batch), said with its parameter count.
TransformerShape gemma3_text_stack(const json& c, const std::string& where,
                                   Diagnostics& diagnostics) {
  const std::string text_where = join_key(where, "text_config");
  const json* text = member(c, "text_config");
  if (!text)
    throw InputError(text_where, "missing (a gemma3 config holds its language model there)");
  as_object(*text, text_where);
  if (const json* type = member(*text, "model_type")) {
    const std::string name = as_string(*type, join_key(text_where, "model_type"));
    if (name != "gemma3_text")
      throw InputError(join_key(text_where, "model_type"), "'" + name + "': expected gemma3_text");
  }
  TransformerShape s =
      llama_like_from_hf(with_gemma3_text_defaults(*text), text_where, "gemma3_text", diagnostics);
  if (const json* vision = member(c, "vision_config")) {
    const Elements left_out =
        gemma3_vision_parameters(*vision, join_key(where, "vision_config"), s.hidden);
    diagnostics.warn(join_key(where, "vision_config"),
                     "left out: the plan is of the text model (text_config); the SigLIP vision "
                     "tower and the multimodal projector (" +
                         std::to_string(left_out) +
                         " parameters) are not counted, nor their activations for images");
  }
  return s;
}

// Shape errors are reported under the config's own key names.
void validate_with_hf_keys(const TransformerShape& shape, const std::string& where, bool gpt2) {
  static const std::map<std::string, std::pair<const char*, const char*>> names = {
      {"layers", {"n_layer", "num_hidden_layers"}},
      {"hidden", {"n_embd", "hidden_size"}},
      {"heads", {"n_head", "num_attention_heads"}},
      {"kv_heads", {"n_head", "num_key_value_heads"}},
      {"head_dim", {"n_embd", "head_dim"}},
      {"ffn_hidden", {"n_inner", "intermediate_size"}},
      {"vocab", {"vocab_size", "vocab_size"}},
      {"max_positions", {"n_positions", "max_position_embeddings"}},
      {"dropout", {"resid_pdrop", "attention_dropout"}}};
  try {
    shape.validate("");
  } catch (const InputError& error) {
    const auto it = names.find(error.where());
    const std::string key = it == names.end() ? error.where() : (gpt2 ? it->second.first : it->second.second);
    const std::string why = std::string(error.what()).substr(error.where().size() + 2);
    throw InputError(join_key(where, key), why);
  }
}

}  // namespace

Model model_from_hf_config(const json& config, Diagnostics& diagnostics, const std::string& name) {
  const std::string where = name;
  as_object(config, where);
  const json* type_value = member(config, "model_type");
  std::string supported = "gpt2";
  for (const std::string& family : llama_like_families()) supported += ", " + family;
  supported +=
      ", gemma3 (its text_config), mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3";
  for (const std::string& family : encoder_families()) supported += ", " + family;
  if (!type_value)
    throw InputError(join_key(where, "model_type"), "missing; expected one of: " + supported);
  const std::string type = as_string(*type_value, join_key(where, "model_type"));
  const auto& families = llama_like_families();
  TransformerShape shape;
  std::string shape_where = where;  // where the shape's keys are
  if (type == "gpt2") {
    shape = gpt2_from_hf(config, where);
  } else if (type == "gemma3") {
    shape = gemma3_text_stack(config, where, diagnostics);
    shape_where = join_key(where, "text_config");
  } else if (type == "gemma3_text") {
    shape = llama_like_from_hf(with_gemma3_text_defaults(config), where, type, diagnostics);
  } else if (std::find(families.begin(), families.end(), type) != families.end()) {
    shape = llama_like_from_hf(config, where, type, diagnostics);
  } else if (const std::string base = mixture_base_family(type); !base.empty()) {
    // The MoE families: their base family's attention, then their experts (sim/model/moe_io.cpp).
    shape = llama_like_from_hf(config, where, base, diagnostics);
    read_mixture(config, where, type, shape, diagnostics);
  } else if (const auto encoder = encoder_shape_from_hf(config, where, type, diagnostics)) {
    shape = *encoder;
  } else {
    throw InputError(join_key(where, "model_type"),
                     "unsupported model type '" + type + "'; supported: " + supported);
  }
  validate_with_hf_keys(shape, shape_where, type == "gpt2");
  // Named as its repository is: _name_or_path when the config has one, else the directory of a
  // config.json, else the file (somedir/mistral.json is "mistral").
  const std::filesystem::path path(name);
  std::string model_name = path.filename() == "config.json" ? path.parent_path().filename().string()
                                                            : path.stem().string();
  if (const json* own = member(config, "_name_or_path");
      own && own->is_string() && !own->get<std::string>().empty()) {
    model_name = std::filesystem::path(own->get<std::string>()).filename().string();
  }
  if (model_name.empty()) model_name = path.stem().string();
  Model model = build_transformer(model_name.empty() ? type : model_name, shape);
  model.source = "hf-config";
  return model;
}

Model load_model(const std::string& spec, Diagnostics& diagnostics) {
  if (!names_file(spec)) return model_from_preset(spec);
  const json document = parse_json_file(spec, "--model");
  if (document.is_object() && document.contains("layers")) return model_from_layers_json(document, diagnostics, spec);
  if (document.is_object() && document.contains("model_type")) return model_from_hf_config(document, diagnostics, spec);
  throw InputError(spec, "not a model file: expected a Hugging Face config.json (with \"model_type\") or a layer list (with \"layers\")");
}

Model with_attention(const Model& model, AttentionImpl impl) {
  if (!model.shape) throw InputError("--attention", "applies to transformer models only, not to '" + model.name + "'");
  TransformerShape shape = *model.shape;
  shape.attention = impl;
  Model rebuilt = build_transformer(model.name, shape);
  rebuilt.source = model.source;
  rebuilt.default_seq_len = model.default_seq_len;
  return rebuilt;
}

Model with_dropout(const Model& model, double probability) {
  if (!model.shape)
    throw InputError("--dropout",
                     "applies to transformer models only, not to '" + model.name + "'");
  if (!(probability >= 0 && probability < 1)) throw InputError("--dropout", "must be in [0, 1)");
  TransformerShape shape = *model.shape;
  shape.dropout = probability;
  Model rebuilt = build_transformer(model.name, shape);
  rebuilt.source = model.source;
  rebuilt.default_seq_len = model.default_seq_len;
  return rebuilt;
}

}  // namespace zerolens
