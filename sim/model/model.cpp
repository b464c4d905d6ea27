#include "sim/model/model.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sim/core/error.hpp"

namespace zerolens {

const char* to_string(LayerKind kind) {
  switch (kind) {
    case LayerKind::Embedding: return "embedding";
    case LayerKind::TransformerBlock: return "transformer_block";
    case LayerKind::FinalNorm: return "final_norm";
    case LayerKind::LmHead: return "lm_head";
    case LayerKind::Generic: return "generic";
  }
  return "generic";
}

const char* to_string(AttentionImpl impl) { return impl == AttentionImpl::Eager ? "eager" : "flash"; }

AttentionImpl parse_attention_impl(const std::string& text) {
  if (text == "eager") return AttentionImpl::Eager;
  if (text == "flash" || text == "sdpa" || text == "flash_attention_2") return AttentionImpl::Flash;
  throw InputError("attention", "unknown attention implementation '" + text +
                                    "' (expected eager or flash)");
}

Elements TensorSpec::numel() const {
  Elements count = 1;
  for (const auto dim : shape) count = checked_mul(count, dim);
  return count;
}

Elements Layer::numel() const {
  Elements count = 0;
  for (const auto& tensor : params) count += tensor.numel();
  return count;
}

namespace {
// Activation figures are computed in double precision; anything past 2^60 bytes (1 EiB) is a
// mistyped batch or sequence length, not a plan, and would overflow the 64-bit sums downstream.
Bytes activation_figure(double bytes) {
  if (!(bytes < 0x1p60)) {
    throw InputError("micro-batch x seq-len", "activation memory of one layer exceeds 2^60 bytes; reduce the "
                                              "micro-batch or the sequence length");
  }
  return Bytes(std::llround(bytes));
}
}  // namespace

ActivationBytes Layer::activation_bytes(std::int64_t micro_batch, std::int64_t seq_len,
                                        Bytes activation_element_bytes) const {
  const double tokens = double(micro_batch) * double(seq_len);
  const double s = double(seq_len);
  const double e = double(activation_element_bytes);
  const ActivationTerms& t = activations;
  ActivationBytes bytes;
  bytes.stored = activation_figure(
      tokens * (e * t.elements + t.mask_bytes +
                s * (e * t.elements_per_position + t.mask_bytes_per_position) + t.fixed_bytes));
  bytes.checkpoint = activation_figure(tokens * e * t.checkpoint_elements);
  const bool casts = activation_element_bytes < 4;
  const double upcast = casts ? 4 * t.forward_upcast_elements : 0;
  const double downcast = casts ? e * t.backward_downcast_elements : 0;
  bytes.forward_working = activation_figure(
      tokens * (e * t.forward_working_elements + t.forward_working_fixed_bytes + upcast));
  bytes.backward_working = activation_figure(
      tokens * (e * (t.backward_working_elements + s * t.backward_working_elements_per_position) +
                t.backward_working_fixed_bytes + downcast));
  return bytes;
}

double Layer::forward_flops(std::int64_t micro_batch, std::int64_t seq_len) const {
  const double tokens = double(micro_batch) * double(seq_len);
  return tokens * (matmul_flops_per_token + double(seq_len) * attention_flops_per_token_position);
}

void TransformerShape::validate(const std::string& where) const {
  auto require = [&](bool ok, const std::string& key, const std::string& why) {
    if (!ok) throw InputError(where.empty() ? key : where + "." + key, why);
  };
  // Upper bounds are far beyond any real model and keep every count inside 64 bits.
  require(layers > 0 && layers <= 10'000, "layers", "must be between 1 and 10000");
  require(hidden > 0 && hidden <= (1 << 20), "hidden", "must be between 1 and 2^20");
  require(heads > 0 && heads <= hidden, "heads", "must be between 1 and the hidden size");
  require(head_dim >= 0 && head_dim <= (1 << 16), "head_dim", "must be between 0 (hidden / heads) and 2^16");
  require(ffn_hidden <= (1 << 24), "ffn_hidden", "must be at most 2^24");
  require(vocab <= (1 << 24), "vocab", "must be at most 2^24");
  require(max_positions <= (1 << 24), "max_positions", "must be at most 2^24");
  require(extra_params <= (std::int64_t(1) << 40), "extra_params", "must be at most 2^40");
  // The attention heads are checked against the hidden size first: a wrong head count is reported
  // as such, not as a key/value head count that fails to divide it.
  require(head_dim > 0 || hidden % heads == 0, "heads",
          "must divide the hidden size " + std::to_string(hidden) + " (got " +
              std::to_string(heads) + ")");
  require(kv_heads > 0 && kv_heads <= heads && heads % kv_heads == 0, "kv_heads",
          "must be positive and divide the number of attention heads " + std::to_string(heads) +
              " (got " + std::to_string(kv_heads) + ")");
  require(ffn_hidden > 0, "ffn_hidden", "must be positive");
  require(vocab > 0, "vocab", "must be positive");
  require(max_positions > 0, "max_positions", "must be positive");
  require(dropout >= 0 && dropout < 1, "dropout", "must be in [0, 1)");
  require(extra_params >= 0, "extra_params", "must not be negative");
}

namespace {

std::vector<std::int64_t> dims(std::initializer_list<std::int64_t> values) { return values; }

void add_norm(std::vector<TensorSpec>& params, const std::string& prefix, const TransformerShape& s) {
  params.push_back({prefix + ".weight", dims({s.hidden})});
  if (s.norm == NormKind::LayerNorm) params.push_back({prefix + ".bias", dims({s.hidden})});
}

void add_linear(std::vector<TensorSpec>& params, const std::string& prefix, std::int64_t in,
                std::int64_t out, bool bias) {
  params.push_back({prefix + ".weight", dims({out, in})});
  if (bias) params.push_back({prefix + ".bias", dims({out})});
}

// Activation terms of one transformer block, per token (see docs/memory-model.md, "Transformer block").
ActivationTerms block_activations(const TransformerShape& s) {
  const double h = double(s.hidden);
  const double hkv = double(s.kv_heads) * double(s.effective_head_dim());
  const double q = double(s.heads) * double(s.effective_head_dim());
  const double f = double(s.ffn_hidden);
  const double a = double(s.heads);
  const bool dropout = s.dropout > 0;
  ActivationTerms t;
  // Attention: norm input h, QKV-projection input h, Q and K (q + hkv), V (hkv), output-projection
  // input q. MLP: norm input h, first-projection input h, then GELU input and output (2f) or, for
  // SwiGLU, gate output, SiLU output, up output and down-projection input (4f).
  t.elements = h + h + (q + hkv) + hkv + q + h + h + (s.mlp == MlpKind::Gelu ? 2 * f : 4 * f);
  if (dropout) t.mask_bytes = h + h;  // attention-output and MLP-output dropout masks
  if (s.attention == AttentionImpl::Eager) {
    // Softmax output a*s per token; with dropout also the dropout mask and its output.
    t.elements_per_position = dropout ? 2 * a : a;
    t.mask_bytes_per_position = dropout ? a : 0;
  } else {
    t.fixed_bytes = 4 * a;  // fp32 log-sum-exp per head and token
  }
  t.checkpoint_elements = h;
  // Backward keeps the gradient of the block output and input plus the widest intermediate gradient.
  t.backward_working_elements = 2 * h + (s.mlp == MlpKind::Gelu ? f : 2 * f);
  if (s.attention == AttentionImpl::Eager) t.backward_working_elements_per_position = a;
  return t;
}

double block_matmul_weights(const TransformerShape& s) {
  const double h = double(s.hidden);
  const double hkv = double(s.kv_heads) * double(s.effective_head_dim());
  const double q = double(s.heads) * double(s.effective_head_dim());
  const double f = double(s.ffn_hidden);
  const double mlp = s.mlp == MlpKind::Gelu ? 2 * h * f : 3 * h * f;
  return h * (q + 2 * hkv) + q * h + mlp;
}

Layer embedding_layer(const TransformerShape& s) {
  Layer layer{.name = "embedding", .kind = LayerKind::Embedding};
  layer.params.push_back({"wte.weight", dims({s.vocab, s.hidden})});
  if (s.learned_positions) layer.params.push_back({"wpe.weight", dims({s.max_positions, s.hidden})});
  layer.activations.fixed_bytes = 8;  // int64 token ids kept for the embedding backward
  if (s.dropout > 0) layer.activations.mask_bytes = double(s.hidden);
  layer.activations.checkpoint_elements = 0;
  layer.activations.backward_working_elements = double(s.hidden);
  return layer;
}

Layer block_layer(const TransformerShape& s, int index) {
  const std::string prefix = "h." + std::to_string(index);
  Layer layer{.name = prefix, .kind = LayerKind::TransformerBlock};
  const std::int64_t h = s.hidden;
  const std::int64_t q = std::int64_t(s.heads) * s.effective_head_dim();
  const std::int64_t kv = std::int64_t(s.kv_heads) * s.effective_head_dim();
  add_norm(layer.params, prefix + ".ln_1", s);
  add_linear(layer.params, prefix + ".attn.q_proj", h, q, s.qkv_bias);
  add_linear(layer.params, prefix + ".attn.k_proj", h, kv, s.qkv_bias);
  add_linear(layer.params, prefix + ".attn.v_proj", h, kv, s.qkv_bias);
  add_linear(layer.params, prefix + ".attn.o_proj", q, h, s.out_proj_bias);
  add_norm(layer.params, prefix + ".ln_2", s);
  if (s.mlp == MlpKind::Gelu) {
    add_linear(layer.params, prefix + ".mlp.fc_in", h, s.ffn_hidden, s.mlp_bias);
    add_linear(layer.params, prefix + ".mlp.fc_out", s.ffn_hidden, h, s.mlp_bias);
  } else {
    add_linear(layer.params, prefix + ".mlp.gate_proj", h, s.ffn_hidden, s.mlp_bias);
    add_linear(layer.params, prefix + ".mlp.up_proj", h, s.ffn_hidden, s.mlp_bias);
    add_linear(layer.params, prefix + ".mlp.down_proj", s.ffn_hidden, h, s.mlp_bias);
  }
  layer.activations = block_activations(s);
  layer.matmul_flops_per_token = 2 * block_matmul_weights(s);
  layer.attention_flops_per_token_position = 4 * double(q);
  return layer;
}

Layer final_norm_layer(const TransformerShape& s) {
  Layer layer{.name = "ln_f", .kind = LayerKind::FinalNorm};
  add_norm(layer.params, "ln_f", s);
  if (s.extra_params > 0) layer.params.push_back({"dense_remainder", dims({s.extra_params})});
  layer.activations.elements = double(s.hidden);  // norm input
  layer.activations.checkpoint_elements = double(s.hidden);
  layer.activations.backward_working_elements = 2 * double(s.hidden);
  return layer;
}

Layer lm_head_layer(const TransformerShape& s, int embedding_index) {
  Layer layer{.name = "lm_head", .kind = LayerKind::LmHead};
  if (s.tied_embeddings) {
    layer.shares_params_of = embedding_index;
  } else {
    layer.params.push_back({"lm_head.weight", dims({s.vocab, s.hidden})});
  }
  const double h = double(s.hidden);
  const double v = double(s.vocab);
  // Keeps its input (h) and the logits (v) in the activation dtype, the fp32 log-probabilities of
  // the cross-entropy (4v bytes) and the int64 labels (8 bytes).
  layer.activations.elements = h + v;
  layer.activations.fixed_bytes = 4 * v + 8;
  layer.activations.checkpoint_elements = h;
  // The loss upcasts 16-bit logits to fp32 (a transient 4v-byte copy).
  layer.activations.forward_upcast_elements = v;
  // Backward: fp32 gradient of the logits, its cast to a 16-bit activation dtype, and the input
  // gradient.
  layer.activations.backward_working_fixed_bytes = 4 * v;
  layer.activations.backward_downcast_elements = v;
  layer.activations.backward_working_elements = h;
  layer.matmul_flops_per_token = 2 * h * v;
  return layer;
}

}  // namespace

Model build_transformer(const std::string& name, const TransformerShape& shape) {
  shape.validate("model");
  Model model;
  model.name = name;
  model.shape = shape;
  model.default_seq_len = shape.max_positions;
  model.layers.push_back(embedding_layer(shape));
  for (int i = 0; i < shape.layers; ++i) model.layers.push_back(block_layer(shape, i));
  model.layers.push_back(final_norm_layer(shape));
  model.layers.push_back(lm_head_layer(shape, 0));
  return model;
}

Elements Model::parameter_count() const {
  Elements count = 0;
  for (const auto& layer : layers) count += layer.numel();
  return count;
}

Elements Model::largest_layer_params() const {
  Elements largest = 0;
  for (const auto& layer : layers) {
    const Layer& owner = layer.shares_params_of >= 0 ? layers[std::size_t(layer.shares_params_of)] : layer;
    largest = std::max(largest, owner.numel());
  }
  return largest;
}

double Model::forward_flops_per_step(std::int64_t micro_batch, std::int64_t seq_len) const {
  double flops = 0;
  for (const auto& layer : layers) flops += layer.forward_flops(micro_batch, seq_len);
  return flops;
}

}  // namespace zerolens
