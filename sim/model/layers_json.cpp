// The explicit layer-list model format (docs/model-format.md).
#include <map>

#include <nlohmann/json.hpp>

#include "sim/core/json_read.hpp"
#include "sim/model/layers_json.hpp"
#include "sim/model/lora.hpp"

namespace zerolens {
namespace {

using nlohmann::json;
using namespace json_read;

const std::map<std::string, LayerKind>& kind_names() {
  static const std::map<std::string, LayerKind> names = {{"embedding", LayerKind::Embedding},
                                                         {"transformer_block", LayerKind::TransformerBlock},
                                                         {"final_norm", LayerKind::FinalNorm},
                                                         {"lm_head", LayerKind::LmHead},
                                                         {"generic", LayerKind::Generic}};
  return names;
}

// Every ActivationTerms field with its JSON name.
struct TermField {
  const char* key;
  double ActivationTerms::*field;
};
constexpr TermField kTermFields[] = {
    {"elements", &ActivationTerms::elements},
    {"mask_bytes", &ActivationTerms::mask_bytes},
    {"elements_per_position", &ActivationTerms::elements_per_position},
    {"mask_bytes_per_position", &ActivationTerms::mask_bytes_per_position},
    {"fixed_bytes", &ActivationTerms::fixed_bytes},
    {"checkpoint_elements", &ActivationTerms::checkpoint_elements},
    {"forward_working_elements", &ActivationTerms::forward_working_elements},
    {"forward_working_fixed_bytes", &ActivationTerms::forward_working_fixed_bytes},
    {"backward_working_elements", &ActivationTerms::backward_working_elements},
    {"backward_working_elements_per_position",
     &ActivationTerms::backward_working_elements_per_position},
    {"backward_working_fixed_bytes", &ActivationTerms::backward_working_fixed_bytes},
    {"forward_upcast_elements", &ActivationTerms::forward_upcast_elements},
    {"backward_downcast_elements", &ActivationTerms::backward_downcast_elements},
    {"fixed_bytes_per_position", &ActivationTerms::fixed_bytes_per_position},
    {"elements_per_source_position", &ActivationTerms::elements_per_source_position},
    {"fixed_bytes_per_source_position", &ActivationTerms::fixed_bytes_per_source_position},
    {"mask_bytes_per_source_position", &ActivationTerms::mask_bytes_per_source_position},
    {"source_elements", &ActivationTerms::source_elements},
    {"backward_working_elements_per_source_position",
     &ActivationTerms::backward_working_elements_per_source_position},
};

// The FLOP fields of a layer beyond its matmuls and attention (written when not 0).
struct FlopField {
  const char* key;
  double Layer::*field;
};
constexpr FlopField kExtraFlopFields[] = {
    {"frozen_matmul_flops_per_token", &Layer::frozen_matmul_flops_per_token},
    {"attention_flops_per_token_source_position",
     &Layer::attention_flops_per_token_source_position},
    {"source_matmul_flops_per_token", &Layer::source_matmul_flops_per_token},
    {"frozen_source_matmul_flops_per_token", &Layer::frozen_source_matmul_flops_per_token},
};

constexpr double kMaxPerToken = 1e12;

ActivationTerms read_terms(const json& object, const std::string& where, Diagnostics& diagnostics) {
  as_object(object, where);
  std::vector<std::string> known;
  ActivationTerms terms;
  for (const auto& f : kTermFields) {
    known.push_back(f.key);
    if (const json* value = member(object, f.key)) terms.*f.field = as_double(*value, join_key(where, f.key), 0, kMaxPerToken);
  }
  warn_unknown_keys(object, known, where, diagnostics);
  return terms;
}

TensorSpec read_tensor(const json& object, const std::string& where) {
  as_object(object, where);
  TensorSpec tensor;
  const json* name = member(object, "name");
  if (!name) throw InputError(join_key(where, "name"), "missing");
  tensor.name = as_string(*name, join_key(where, "name"));
  const json* shape = member(object, "shape");
  if (!shape || !shape->is_array() || shape->empty()) {
    throw InputError(join_key(where, "shape"), "must be a non-empty array of positive integers");
  }
  Elements numel = 1;
  for (std::size_t i = 0; i < shape->size(); ++i) {
    const std::string at = join_key(where, "shape[" + std::to_string(i) + "]");
    const std::int64_t dim = as_int((*shape)[i], at, 1, std::int64_t(1) << 50);
    tensor.shape.push_back(dim);
    try {
      numel = checked_mul(numel, dim);
    } catch (const std::overflow_error&) {
      throw InputError(join_key(where, "shape"), "has more elements than a 64-bit count holds");
    }
  }
  if (numel > std::int64_t(1) << 50) throw InputError(join_key(where, "shape"), "tensor too large (over 2^50 elements)");
  if (const json* trainable = member(object, "trainable"))
    tensor.trainable = as_bool(*trainable, join_key(where, "trainable"));
  if (const json* format = member(object, "format")) {
    const std::string text = as_string(*format, join_key(where, "format"));
    bool known = false;
    for (const WeightFormat f :
         {WeightFormat::TrainingDtype, WeightFormat::Nf4, WeightFormat::Nf4DoubleQuant}) {
      if (text == to_string(f)) tensor.format = f, known = true;
    }
    if (!known)
      throw InputError(
          join_key(where, "format"),
          "unknown format '" + text + "' (expected training_dtype, nf4 or nf4_double_quant)");
  }
  return tensor;
}

Layer read_layer(const json& object, const std::string& where, const std::map<std::string, int>& earlier,
                 const std::vector<Layer>& layers, Diagnostics& diagnostics) {
  as_object(object, where);
  warn_unknown_keys(
      object,
      {"name", "kind", "params", "shares_params_of", "activations", "matmul_flops_per_token",
       "attention_flops_per_token_position", "frozen_matmul_flops_per_token",
       "attention_flops_per_token_source_position", "source_matmul_flops_per_token",
       "frozen_source_matmul_flops_per_token", "on_target"},
      where, diagnostics);
  Layer layer;
  const json* name = member(object, "name");
  if (!name) throw InputError(join_key(where, "name"), "missing");
  layer.name = as_string(*name, join_key(where, "name"));
  if (layer.name.empty()) throw InputError(join_key(where, "name"), "must not be empty");
  if (earlier.count(layer.name)) throw InputError(join_key(where, "name"), "duplicate layer name '" + layer.name + "'");
  if (const json* kind = member(object, "kind")) {
    const std::string text = as_string(*kind, join_key(where, "kind"));
    const auto it = kind_names().find(text);
    if (it == kind_names().end()) {
      throw InputError(join_key(where, "kind"), "unknown kind '" + text +
                                                    "'; expected embedding, transformer_block, final_norm, lm_head or generic");
    }
    layer.kind = it->second;
  }
  if (const json* params = member(object, "params")) {
    if (!params->is_array()) throw InputError(join_key(where, "params"), "must be an array of tensors");
    for (std::size_t i = 0; i < params->size(); ++i) {
      layer.params.push_back(read_tensor((*params)[i], join_key(where, "params[" + std::to_string(i) + "]")));
    }
  }
  if (const json* shared = member(object, "shares_params_of")) {
    const std::string key = join_key(where, "shares_params_of");
    const std::string target = as_string(*shared, key);
    const auto it = earlier.find(target);
    if (it == earlier.end()) throw InputError(key, "names no earlier layer: '" + target + "'");
    if (layers[std::size_t(it->second)].shares_params_of >= 0) throw InputError(key, "must name a layer that owns its parameters");
    if (!layer.params.empty()) throw InputError(key, "a layer that shares parameters must not list its own");
    layer.shares_params_of = it->second;
  }
  if (const json* terms = member(object, "activations")) layer.activations = read_terms(*terms, join_key(where, "activations"), diagnostics);
  if (const json* flops = member(object, "matmul_flops_per_token")) {
    layer.matmul_flops_per_token = as_double(*flops, join_key(where, "matmul_flops_per_token"), 0, 1e15);
  }
  if (const json* flops = member(object, "attention_flops_per_token_position")) {
    layer.attention_flops_per_token_position = as_double(*flops, join_key(where, "attention_flops_per_token_position"), 0, 1e15);
  }
  for (const auto& f : kExtraFlopFields) {
    if (const json* flops = member(object, f.key))
      layer.*f.field = as_double(*flops, join_key(where, f.key), 0, 1e15);
  }
  if (layer.frozen_matmul_flops_per_token > layer.matmul_flops_per_token)
    throw InputError(join_key(where, "frozen_matmul_flops_per_token"),
                     "must not exceed matmul_flops_per_token");
  if (layer.frozen_source_matmul_flops_per_token > layer.source_matmul_flops_per_token)
    throw InputError(join_key(where, "frozen_source_matmul_flops_per_token"),
                     "must not exceed source_matmul_flops_per_token");
  if (const json* target = member(object, "on_target"))
    layer.on_target = as_bool(*target, join_key(where, "on_target"));
  return layer;
}

// The transformer shape a layer list was built from (written by zerolens with the layers): tensor
// and pipeline parallelism rebuild the model from it (a rank's shard, a stage's blocks).
json shape_to_json(const TransformerShape& s) {
  json shape = {{"family", s.family},
                {"layers", s.layers},
                {"hidden", s.hidden},
                {"heads", s.heads},
                {"kv_heads", s.kv_heads},
                {"head_dim", s.head_dim},
                {"ffn_hidden", s.ffn_hidden},
                {"vocab", s.vocab},
                {"max_positions", s.max_positions},
                {"learned_positions", s.learned_positions},
                {"tied_embeddings", s.tied_embeddings},
                {"qkv_bias", s.qkv_bias},
                {"out_proj_bias", s.out_proj_bias},
                {"mlp_bias", s.mlp_bias},
                {"norm", s.norm == NormKind::LayerNorm ? "layernorm" : "rmsnorm"},
                {"mlp", s.mlp == MlpKind::Gelu ? "gelu" : "swiglu"},
                {"dropout", s.dropout},
                {"attention", to_string(s.attention)},
                {"extra_params", s.extra_params}};
  // Written when set, so files written before them still read.
  if (s.qk_norm) shape["qk_norm"] = true;
  if (s.sandwich_norms) shape["sandwich_norms"] = true;
  if (s.moe) {
    const MoeShape& m = *s.moe;
    shape["moe"] = {{"experts", m.experts},
                    {"top_k", m.top_k},
                    {"expert_ffn", m.expert_ffn},
                    {"shared_ffn", m.shared_ffn},
                    {"shared_expert_gate", m.shared_expert_gate},
                    {"router_bias", m.router_bias},
                    {"first_dense_layers", m.first_dense_layers},
                    {"sparse_step", m.sparse_step},
                    {"dense_layers", m.dense_layers}};
  }
  if (s.mla) {
    const MlaShape& a = *s.mla;
    shape["mla"] = {{"q_lora_rank", a.q_lora_rank},
                    {"kv_lora_rank", a.kv_lora_rank},
                    {"qk_rope_head_dim", a.qk_rope_head_dim},
                    {"qk_nope_head_dim", a.qk_nope_head_dim},
                    {"v_head_dim", a.v_head_dim}};
  }
  if (s.architecture != Architecture::Decoder) {
    shape["architecture"] = to_string(s.architecture);
    shape["token_types"] = s.token_types;
    shape["decoder_layers"] = s.decoder_layers;
    shape["relative_attention_buckets"] = s.relative_attention_buckets;
    shape["loss_in_fp32"] = s.loss_in_fp32;
  }
  if (s.lora.active()) {
    shape["lora"] = {{"rank", s.lora.rank},
                     {"targets", s.lora.targets},
                     {"base_format", to_string(s.lora.base_format)},
                     {"dropout", s.lora.dropout}};
  }
  return shape;
}

// The MoE and MLA parts of a shape (sim/model/moe_shape.hpp), every key required when the part is
// written; validate() checks the values' ranges.
MoeShape moe_from_json(const json& object, const std::string& where) {
  as_object(object, where);
  auto integer = [&](const char* key, std::int64_t high) {
    if (!object.contains(key)) throw InputError(join_key(where, key), "missing");
    return as_int(object.at(key), join_key(where, key), 0, high);
  };
  auto flag = [&](const char* key) {
    if (!object.contains(key)) throw InputError(join_key(where, key), "missing");
    return as_bool(object.at(key), join_key(where, key));
  };
  MoeShape m;
  m.experts = int(integer("experts", 1 << 16));
  m.top_k = int(integer("top_k", 1 << 16));
  m.expert_ffn = integer("expert_ffn", 1 << 24);
  m.shared_ffn = integer("shared_ffn", 1 << 24);
  m.shared_expert_gate = flag("shared_expert_gate");
  m.router_bias = flag("router_bias");
  m.first_dense_layers = int(integer("first_dense_layers", 10'000));
  m.sparse_step = int(integer("sparse_step", 10'000));
  const json* dense = member(object, "dense_layers");
  if (!dense || !dense->is_array())
    throw InputError(join_key(where, "dense_layers"), "must be an array of layer indices");
  for (const json& layer : *dense)
    m.dense_layers.push_back(int(as_int(layer, join_key(where, "dense_layers"), 0, 10'000)));
  return m;
}

MlaShape mla_from_json(const json& object, const std::string& where) {
  as_object(object, where);
  auto integer = [&](const char* key) {
    if (!object.contains(key)) throw InputError(join_key(where, key), "missing");
    return as_int(object.at(key), join_key(where, key), 0, 1 << 20);
  };
  return MlaShape{.q_lora_rank = integer("q_lora_rank"),
                  .kv_lora_rank = integer("kv_lora_rank"),
                  .qk_rope_head_dim = integer("qk_rope_head_dim"),
                  .qk_nope_head_dim = integer("qk_nope_head_dim"),
                  .v_head_dim = integer("v_head_dim")};
}

std::string one_of(const json& object, const std::string& key, const std::string& where,
                   std::initializer_list<const char*> names) {
  const std::string text = as_string(object.at(key), join_key(where, key));
  for (const char* name : names) {
    if (text == name) return text;
  }
  std::string expected;
  for (const char* name : names) expected += (expected.empty() ? "" : " or ") + std::string(name);
  throw InputError(join_key(where, key),
                   "unknown value '" + text + "' (expected " + expected + ")");
}

// A shape's LoRA (written whole when it has one), checked under the file's keys.
LoraConfig lora_from_json(const json& object, TransformerShape shape, const std::string& where) {
  as_object(object, where);
  for (const char* key : {"rank", "targets", "base_format", "dropout"}) {
    if (!object.contains(key))
      throw InputError(join_key(where, key), "missing (LoRA is written whole)");
  }
  LoraConfig& lora = shape.lora;
  lora.rank = int(as_int(object.at("rank"), join_key(where, "rank"), 1, 65536));
  const json& targets = object.at("targets");
  if (!targets.is_array())
    throw InputError(join_key(where, "targets"), "must be an array of module names");
  for (std::size_t i = 0; i < targets.size(); ++i) {
    lora.targets.push_back(
        as_string(targets[i], join_key(where, "targets[" + std::to_string(i) + "]")));
  }
  const std::string format = as_string(object.at("base_format"), join_key(where, "base_format"));
  if (format == to_string(WeightFormat::Nf4)) {
    lora.base_format = WeightFormat::Nf4;
  } else if (format == to_string(WeightFormat::Nf4DoubleQuant)) {
    lora.base_format = WeightFormat::Nf4DoubleQuant;
  } else if (format != to_string(WeightFormat::TrainingDtype)) {
    throw InputError(
        join_key(where, "base_format"),
        "unknown format '" + format + "' (expected training_dtype, nf4 or nf4_double_quant)");
  }
  lora.dropout = as_double(object.at("dropout"), join_key(where, "dropout"), 0, 0.999);
  check_lora(shape, {.rank = join_key(where, "rank"),
                     .targets = join_key(where, "targets"),
                     .base_format = join_key(where, "base_format"),
                     .dropout = join_key(where, "dropout")});
  return lora;
}

// Every key is required: the shape is written whole, and a partial one would be a different model.
TransformerShape shape_from_json(const json& object, const std::string& where) {
  as_object(object, where);
  const json written = shape_to_json(TransformerShape{});
  for (const auto& [key, value] : written.items()) {
    if (!object.contains(key))
      throw InputError(join_key(where, key), "missing (the shape is written whole)");
  }
  auto integer = [&](const char* key, std::int64_t low, std::int64_t high) {
    return as_int(object.at(key), join_key(where, key), low, high);
  };
  auto flag = [&](const char* key) { return as_bool(object.at(key), join_key(where, key)); };
  TransformerShape s;
  s.family = as_string(object.at("family"), join_key(where, "family"));  // a name, not a rule
  if (s.family.size() > 64)
    throw InputError(join_key(where, "family"), "longer than 64 characters");
  s.layers = int(integer("layers", 1, 10'000));
  s.hidden = integer("hidden", 1, 1 << 20);
  s.heads = int(integer("heads", 1, 1 << 20));
  s.kv_heads = int(integer("kv_heads", 1, 1 << 20));
  s.head_dim = integer("head_dim", 0, 1 << 16);
  s.ffn_hidden = integer("ffn_hidden", 1, 1 << 24);
  s.vocab = integer("vocab", 1, 1 << 24);
  s.max_positions = integer("max_positions", 1, 1 << 24);
  s.learned_positions = flag("learned_positions");
  s.tied_embeddings = flag("tied_embeddings");
  s.qkv_bias = flag("qkv_bias");
  s.out_proj_bias = flag("out_proj_bias");
  s.mlp_bias = flag("mlp_bias");
  s.norm = one_of(object, "norm", where, {"layernorm", "rmsnorm"}) == "layernorm"
               ? NormKind::LayerNorm
               : NormKind::RmsNorm;
  s.mlp =
      one_of(object, "mlp", where, {"gelu", "swiglu"}) == "gelu" ? MlpKind::Gelu : MlpKind::SwiGlu;
  s.dropout = as_double(object.at("dropout"), join_key(where, "dropout"), 0, 0.999);
  s.attention = parse_attention_impl(one_of(object, "attention", where, {"eager", "flash"}));
  s.extra_params = integer("extra_params", 0, std::int64_t(1) << 40);
  if (object.contains("qk_norm")) s.qk_norm = flag("qk_norm");
  if (object.contains("sandwich_norms")) s.sandwich_norms = flag("sandwich_norms");
  if (object.contains("moe")) s.moe = moe_from_json(object.at("moe"), join_key(where, "moe"));
  if (object.contains("mla")) s.mla = mla_from_json(object.at("mla"), join_key(where, "mla"));
  if (object.contains("architecture")) {  // then written with its fields
    const std::string text =
        one_of(object, "architecture", where, {"decoder", "encoder", "encoder_decoder"});
    s.architecture = text == "encoder"           ? Architecture::Encoder
                     : text == "encoder_decoder" ? Architecture::EncoderDecoder
                                                 : Architecture::Decoder;
    for (const char* key :
         {"token_types", "decoder_layers", "relative_attention_buckets", "loss_in_fp32"}) {
      if (!object.contains(key))
        throw InputError(join_key(where, key), "missing (written with the architecture)");
    }
    s.token_types = integer("token_types", 0, 1 << 24);
    s.decoder_layers = int(integer("decoder_layers", 0, 10'000));
    s.relative_attention_buckets = integer("relative_attention_buckets", 0, 1 << 16);
    s.loss_in_fp32 = flag("loss_in_fp32");
  }
  if (const json* lora = member(object, "lora"))
    s.lora = lora_from_json(*lora, s, join_key(where, "lora"));
  s.validate(where);
  return s;
}

}  // namespace

Model model_from_layers_json(const json& document, Diagnostics& diagnostics, const std::string& name) {
  as_object(document, name);
  warn_unknown_keys(document,
                    {"format", "version", "name", "default_seq_len", "layers", "transformer"}, name,
                    diagnostics);
  if (const json* version = member(document, "version")) {
    if (as_int(*version, join_key(name, "version")) != 1) throw InputError(join_key(name, "version"), "unsupported version (expected 1)");
  }
  Model model;
  model.source = "layers-json";
  model.name = name;
  if (const json* title = member(document, "name")) model.name = as_string(*title, join_key(name, "name"));
  if (const json* seq = member(document, "default_seq_len")) {
    model.default_seq_len = as_int(*seq, join_key(name, "default_seq_len"), 1, 1 << 24);
  }
  const json* layers = member(document, "layers");
  if (!layers || !layers->is_array() || layers->empty()) {
    throw InputError(join_key(name, "layers"), "must be a non-empty array of layers");
  }
  if (layers->size() > 100'000) throw InputError(join_key(name, "layers"), "more than 100000 layers");
  std::map<std::string, int> earlier;
  Elements total = 0;
  for (std::size_t i = 0; i < layers->size(); ++i) {
    const std::string where = join_key(name, "layers[" + std::to_string(i) + "]");
    model.layers.push_back(read_layer((*layers)[i], where, earlier, model.layers, diagnostics));
    earlier[model.layers.back().name] = int(i);
    for (const auto& tensor : model.layers.back().params) {
      total += tensor.numel();  // each tensor is at most 2^50 elements, so this cannot overflow first
      if (total > std::int64_t(1) << 52) throw InputError(join_key(where, "params"), "the model exceeds 2^52 parameters");
    }
  }
  if (total <= 0) throw InputError(join_key(name, "layers"), "the model has no parameters");
  if (const json* shape = member(document, "transformer")) {
    model.shape = shape_from_json(*shape, join_key(name, "transformer"));
    // The layers must be the shape's: tensor and pipeline parallelism rebuild them from it.
    Model built = build_transformer(model.name, *model.shape);
    if (built.parameter_count() != model.parameter_count()) {
      throw InputError(join_key(name, "transformer"),
                       "does not match the layers (another parameter count)");
    }
    // A MoE layer's routing and its experts' tensors are not layer-list keys: its layers are the
    // shape's.
    if (model.shape->moe) model.layers = std::move(built.layers);
  }
  return model;
}

json model_to_json(const Model& model) {
  json layers = json::array();
  for (const auto& layer : model.layers) {
    json entry = {{"name", layer.name}, {"kind", to_string(layer.kind)}};
    json params = json::array();
    for (const auto& tensor : layer.params) {
      json entry_tensor = {{"name", tensor.name}, {"shape", tensor.shape}};
      if (!tensor.trainable) entry_tensor["trainable"] = false;
      if (tensor.format != WeightFormat::TrainingDtype)
        entry_tensor["format"] = to_string(tensor.format);
      params.push_back(entry_tensor);
    }
    entry["params"] = params;
    if (layer.shares_params_of >= 0) entry["shares_params_of"] = model.layers[std::size_t(layer.shares_params_of)].name;
    json terms = json::object();
    for (const auto& f : kTermFields) {
      if (layer.activations.*f.field != 0) terms[f.key] = layer.activations.*f.field;
    }
    entry["activations"] = terms;
    entry["matmul_flops_per_token"] = layer.matmul_flops_per_token;
    entry["attention_flops_per_token_position"] = layer.attention_flops_per_token_position;
    for (const auto& f : kExtraFlopFields) {
      if (layer.*f.field != 0) entry[f.key] = layer.*f.field;
    }
    if (layer.on_target) entry["on_target"] = true;
    layers.push_back(entry);
  }
  json out = {{"format", "zerolens.model"},
              {"version", 1},
              {"name", model.name},
              {"default_seq_len", model.default_seq_len},
              {"layers", layers}};
  if (model.shape) out["transformer"] = shape_to_json(*model.shape);
  return out;
}

}  // namespace zerolens
