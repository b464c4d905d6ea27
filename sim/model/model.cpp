#include "sim/model/model.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sim/core/error.hpp"
#include "sim/model/moe.hpp"
#include "sim/model/encoder_models.hpp"
#include "sim/model/lora.hpp"

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

Elements Layer::trainable_numel() const {
  Elements count = 0;
  for (const auto& tensor : params) count += tensor.trainable ? tensor.numel() : 0;
  return count;
}

const char* to_string(WeightFormat format) {
  switch (format) {
    case WeightFormat::TrainingDtype:
      return "training_dtype";
    case WeightFormat::Nf4:
      return "nf4";
    case WeightFormat::Nf4DoubleQuant:
      return "nf4_double_quant";
  }
  return "training_dtype";
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
                                        Bytes activation_element_bytes,
                                        std::int64_t target_len) const {
  const double s = double(own_len(seq_len, target_len));
  const double tokens = double(micro_batch) * s;
  const double source = double(seq_len);
  const double e = double(activation_element_bytes);
  const ActivationTerms& t = activations;
  ActivationBytes bytes;
  bytes.stored = activation_figure(
      tokens * (e * t.elements + t.mask_bytes +
                s * (e * t.elements_per_position + t.mask_bytes_per_position +
                     t.fixed_bytes_per_position) +
                source * (e * t.elements_per_source_position + t.mask_bytes_per_source_position +
                          t.fixed_bytes_per_source_position) +
                t.fixed_bytes) +
      double(micro_batch) * source * e * t.source_elements);
  bytes.checkpoint = activation_figure(tokens * e * t.checkpoint_elements);
  const bool casts = activation_element_bytes < 4;
  const double upcast = casts ? 4 * t.forward_upcast_elements : 0;
  const double downcast = casts ? e * t.backward_downcast_elements : 0;
  bytes.forward_working = activation_figure(
      tokens * (e * t.forward_working_elements + t.forward_working_fixed_bytes + upcast));
  // A MoE layer's experts compute rows that do not follow the tokens linearly (capacity).
  const double rows = moe ? double(moe->rows(micro_batch * seq_len)) : 0;
  const double attention = tokens * e *
                           (s * t.backward_working_elements_per_position +
                            source * t.backward_working_elements_per_source_position);
  const double routed = moe ? rows * e * moe->row_backward_working_elements -
                                  tokens * e * moe->token_released_elements
                            : 0;
  // Autograd runs a MoE block's MLP backward (its rows' gradients) to the end and frees those
  // gradients before the attention's backward allocates its score gradients, so the block's
  // working set is the wider of the two phases, not their sum. In the rows' phase the combine's
  // kept rows are already gone (MoeRouting::token_released_elements).
  bytes.backward_working = activation_figure(
      tokens * (e * t.backward_working_elements + t.backward_working_fixed_bytes + downcast) +
      std::max(attention, routed));
  if (moe) {
    bytes.stored += activation_figure(rows * e * moe->row_elements);
    bytes.forward_working += activation_figure(rows * e * moe->row_forward_working_elements);
  }
  return bytes;
}

double Layer::forward_flops(std::int64_t micro_batch, std::int64_t seq_len,
                            std::int64_t target_len) const {
  const double s = double(own_len(seq_len, target_len));
  const double tokens = double(micro_batch) * s;
  const double source_tokens = double(micro_batch) * double(seq_len);
  const double rows = moe ? double(moe->rows(micro_batch * seq_len)) * moe->row_flops : 0;
  return tokens * (matmul_flops_per_token + s * attention_flops_per_token_position +
                   double(seq_len) * attention_flops_per_token_source_position) +
         source_tokens * source_matmul_flops_per_token + rows;
}

double Layer::backward_flops(std::int64_t micro_batch, std::int64_t seq_len,
                             std::int64_t target_len) const {
  const double tokens = double(micro_batch) * double(own_len(seq_len, target_len));
  const double source_tokens = double(micro_batch) * double(seq_len);
  return 2 * forward_flops(micro_batch, seq_len, target_len) -
         tokens * frozen_matmul_flops_per_token -
         source_tokens * frozen_source_matmul_flops_per_token;
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
  validate_mixture(*this, where);
  require(token_types >= 0 && token_types <= (1 << 24), "token_types",
          "must be between 0 and 2^24");
  require(relative_attention_buckets >= 0 && relative_attention_buckets <= (1 << 16),
          "relative_attention_buckets", "must be between 0 and 2^16");
  const bool encoder_decoder = architecture == Architecture::EncoderDecoder;
  require(encoder_decoder ? decoder_layers > 0 && decoder_layers <= 10'000 : decoder_layers == 0,
          "decoder_layers",
          encoder_decoder ? "must be between 1 and 10000" : "applies to encoder-decoders only");
}

namespace {

std::vector<std::int64_t> dims(std::initializer_list<std::int64_t> values) { return values; }

// How one rank of the TP group holds the model: the split sizes and the layers' collectives.
struct Split {
  double t = 1;            // ranks of the TP group
  bool sp = false;         // sequence parallelism
  std::int64_t vocab = 0;  // this rank's vocabulary rows (padded under TP)
  // Elements per token of the residual stream a rank holds: h, or h / t along the sequence.
  double sequence(double elements) const { return sp ? elements / t : elements; }
};

Split make_split(const TransformerShape& s, const TensorParallelism& tp) {
  Split split{.t = double(tp.size), .sp = tp.active() && tp.sequence_parallel, .vocab = s.vocab};
  if (tp.active()) {
    const std::int64_t multiple = tp.vocab_multiple * tp.size;
    split.vocab = (s.vocab + multiple - 1) / multiple * multiple / tp.size;
  }
  return split;
}

void add_norm(std::vector<TensorSpec>& params, const std::string& prefix, const TransformerShape& s,
              const Split& split) {
  params.push_back({prefix + ".weight", dims({s.hidden}), TensorSplit::Replicated, split.sp});
  if (s.norm == NormKind::LayerNorm) {
    params.push_back({prefix + ".bias", dims({s.hidden}), TensorSplit::Replicated, split.sp});
  }
}

// A column-parallel linear holds out / t rows of its weight and bias; a row-parallel one in / t
// columns and the whole bias (added after the reduction).
void add_linear(std::vector<TensorSpec>& params, const std::string& prefix, std::int64_t in,
                std::int64_t out, bool bias, TensorSplit split, const Split& tp) {
  const auto t = std::int64_t(tp.t);
  const bool column = split == TensorSplit::Column, row = split == TensorSplit::Row;
  const TensorSplit held = tp.t > 1 ? split : TensorSplit::Replicated;
  params.push_back({prefix + ".weight", dims({column ? out / t : out, row ? in / t : in}), held});
  if (bias) {
    params.push_back({prefix + ".bias", dims({column ? out / t : out}),
                      column && tp.t > 1 ? TensorSplit::Column : TensorSplit::Replicated,
                      row && tp.sp});
  }
}

// Megatron's f/g operators around a parallel region (docs/parallelism.md): without sequence
// parallelism the region's output is all-reduced in forward and its input gradient in backward;
// with it, the input is all-gathered and the output reduce-scattered, and a column-parallel
// backward gathers its saved input again and reduce-scatters its input gradient.
void add_region(Layer& layer, double h, const Split& split) {
  using K = TpCollectiveKind;
  if (split.t <= 1) return;
  if (!split.sp) {
    layer.tp_forward.push_back({K::AllReduce, h});
    layer.tp_backward.push_back({K::AllReduce, h});
    return;
  }
  layer.tp_forward.push_back({K::AllGather, h});
  layer.tp_forward.push_back({K::ReduceScatter, h});
  // Backward runs the region in reverse: the output's gradient gathered, then the input re-gathered
  // for the weight gradient and the input gradient reduce-scattered.
  layer.tp_backward.push_back({K::AllGather, h});
  layer.tp_backward.push_back({K::AllGather, h});
  layer.tp_backward.push_back({K::ReduceScatter, h});
}

// Activation terms of one transformer block, per token (see docs/memory-model.md, "Transformer
// block", and docs/parallelism.md for the split: Korthikanti et al. 2022, Sec. 4.2).
ActivationTerms block_activations(const TransformerShape& s, const Split& split) {
  const double h = double(s.hidden);
  const double hkv = double(s.kv_heads) * double(s.effective_head_dim());
  const double q = double(s.heads) * double(s.effective_head_dim());
  const double f = double(s.ffn_hidden);
  const double a = double(s.heads);
  const double t = split.t;
  const bool dropout = s.dropout > 0;
  ActivationTerms terms;
  // Attention: norm input h, QKV-projection input h, Q and K (q + hkv), V (hkv), output-projection
  // input q. MLP: norm input h, first-projection input h, then GELU input and output (2f) or, for
  // SwiGLU, gate output, SiLU output, up output and down-projection input (4f). The four inputs
  // of h are the residual stream, whole on every TP rank (split along the sequence with SP); the
  // rest lives inside the parallel regions, split over the heads or the MLP width.
  // Sandwich norms keep their inputs too (the attention and MLP outputs, h each); a QK norm the
  // projected queries and keys it normalises (q + hkv).
  const double stream = h + h + h + h + (s.sandwich_norms ? 2 * h : 0);
  const double inside =
      (q + hkv) + hkv + q + (s.mlp == MlpKind::Gelu ? 2 * f : 4 * f) + (s.qk_norm ? q + hkv : 0);
  terms.elements = split.sequence(stream) + inside / t;
  if (dropout) terms.mask_bytes = split.sequence(h + h);  // attention- and MLP-output dropout masks
  if (s.attention == AttentionImpl::Eager) {
    // Softmax output a*s per token; with dropout also the dropout mask and its output.
    terms.elements_per_position = (dropout ? 2 * a : a) / t;
    terms.mask_bytes_per_position = (dropout ? a : 0) / t;
  } else {
    terms.fixed_bytes = 4 * a / t;  // fp32 log-sum-exp per head and token
  }
  terms.checkpoint_elements = split.sequence(h);
  // Backward keeps the gradient of the block output and input plus the widest intermediate gradient.
  terms.backward_working_elements =
      split.sequence(2 * h) + (s.mlp == MlpKind::Gelu ? f : 2 * f) / t;
  if (s.attention == AttentionImpl::Eager) terms.backward_working_elements_per_position = a / t;
  if (split.sp) {
    // The all-gathered input of a column-parallel projection (Megatron's global memory buffer):
    // live during the forward, and again when the backward gathers it for the weight gradient.
    terms.forward_working_elements = h;
    terms.backward_working_elements += h;
  }
  return terms;
}

double block_matmul_weights(const TransformerShape& s) {
  const double h = double(s.hidden);
  const double hkv = double(s.kv_heads) * double(s.effective_head_dim());
  const double q = double(s.heads) * double(s.effective_head_dim());
  const double f = double(s.ffn_hidden);
  const double mlp = s.mlp == MlpKind::Gelu ? 2 * h * f : 3 * h * f;
  return h * (q + 2 * hkv) + q * h + mlp;
}

Layer embedding_layer(const TransformerShape& s, const Split& split) {
  Layer layer{.name = "embedding", .kind = LayerKind::Embedding};
  const TensorSplit vocab = split.t > 1 ? TensorSplit::Vocab : TensorSplit::Replicated;
  layer.params.push_back({"wte.weight", dims({split.vocab, s.hidden}), vocab});
  if (s.learned_positions) layer.params.push_back({"wpe.weight", dims({s.max_positions, s.hidden})});
  layer.activations.fixed_bytes = 8;  // int64 token ids kept for the embedding backward
  if (s.dropout > 0) layer.activations.mask_bytes = split.sequence(double(s.hidden));
  layer.activations.checkpoint_elements = 0;
  layer.activations.backward_working_elements = double(s.hidden);
  if (split.t > 1) {
    // Each rank looks up its rows (zeros elsewhere); the partial outputs are summed: all-reduced,
    // or reduce-scattered along the sequence (whose backward gathers the gradient).
    using K = TpCollectiveKind;
    const double h = double(s.hidden);
    layer.tp_forward.push_back({split.sp ? K::ReduceScatter : K::AllReduce, h});
    if (split.sp) layer.tp_backward.push_back({K::AllGather, h});
  }
  return layer;
}

Layer block_layer(const TransformerShape& s, int index, const Split& split) {
  const std::string prefix = "h." + std::to_string(index);
  Layer layer{.name = prefix, .kind = LayerKind::TransformerBlock};
  const std::int64_t h = s.hidden;
  const std::int64_t q = std::int64_t(s.heads) * s.effective_head_dim();
  const std::int64_t kv = std::int64_t(s.kv_heads) * s.effective_head_dim();
  using enum TensorSplit;
  add_norm(layer.params, prefix + ".ln_1", s, split);
  add_linear(layer.params, prefix + ".attn.q_proj", h, q, s.qkv_bias, Column, split);
  add_linear(layer.params, prefix + ".attn.k_proj", h, kv, s.qkv_bias, Column, split);
  add_linear(layer.params, prefix + ".attn.v_proj", h, kv, s.qkv_bias, Column, split);
  if (s.qk_norm) {  // per head: whatever the heads a TP rank holds, the same weights
    layer.params.push_back({prefix + ".attn.q_norm.weight", dims({s.effective_head_dim()})});
    layer.params.push_back({prefix + ".attn.k_norm.weight", dims({s.effective_head_dim()})});
  }
  add_linear(layer.params, prefix + ".attn.o_proj", q, h, s.out_proj_bias, Row, split);
  if (s.sandwich_norms) add_norm(layer.params, prefix + ".attn.post_norm", s, split);
  add_norm(layer.params, prefix + ".ln_2", s, split);
  if (s.mlp == MlpKind::Gelu) {
    add_linear(layer.params, prefix + ".mlp.fc_in", h, s.ffn_hidden, s.mlp_bias, Column, split);
    add_linear(layer.params, prefix + ".mlp.fc_out", s.ffn_hidden, h, s.mlp_bias, Row, split);
  } else {
    add_linear(layer.params, prefix + ".mlp.gate_proj", h, s.ffn_hidden, s.mlp_bias, Column, split);
    add_linear(layer.params, prefix + ".mlp.up_proj", h, s.ffn_hidden, s.mlp_bias, Column, split);
    add_linear(layer.params, prefix + ".mlp.down_proj", s.ffn_hidden, h, s.mlp_bias, Row, split);
  }
  if (s.sandwich_norms) add_norm(layer.params, prefix + ".mlp.post_norm", s, split);
  layer.activations = block_activations(s, split);
  layer.matmul_flops_per_token = 2 * block_matmul_weights(s) / split.t;
  layer.attention_flops_per_token_position = 4 * double(q) / split.t;
  add_region(layer, double(h), split);  // attention
  add_region(layer, double(h), split);  // MLP
  return layer;
}

Layer final_norm_layer(const TransformerShape& s, const Split& split) {
  Layer layer{.name = "ln_f", .kind = LayerKind::FinalNorm};
  add_norm(layer.params, "ln_f", s, split);
  if (s.extra_params > 0) layer.params.push_back({"dense_remainder", dims({s.extra_params})});
  const double h = split.sequence(double(s.hidden));
  layer.activations.elements = h;  // norm input
  layer.activations.checkpoint_elements = h;
  layer.activations.backward_working_elements = 2 * h;
  return layer;
}

Layer lm_head_layer(const TransformerShape& s, int embedding_index, const Split& split) {
  Layer layer{.name = "lm_head", .kind = LayerKind::LmHead};
  if (s.tied_embeddings) {
    layer.shares_params_of = embedding_index;
  } else {
    layer.params.push_back({"lm_head.weight", dims({split.vocab, s.hidden}),
                            split.t > 1 ? TensorSplit::Vocab : TensorSplit::Replicated});
  }
  const double h = double(s.hidden);
  const double v = double(split.vocab);
  // Keeps its input (h; along the sequence with SP, gathered again in backward) and this rank's
  // logits (v) in the activation dtype, the fp32 log-probabilities of the cross-entropy (4v bytes)
  // and the int64 labels (8 bytes).
  layer.activations.elements = split.sequence(h) + v;
  layer.activations.fixed_bytes = 4 * v + 8;
  layer.activations.checkpoint_elements = split.sequence(h);
  // The loss upcasts 16-bit logits to fp32 (a transient 4v-byte copy).
  layer.activations.forward_upcast_elements = v;
  // Backward: fp32 gradient of the logits, its cast to a 16-bit activation dtype, and the input
  // gradient.
  layer.activations.backward_downcast_elements = v;
  layer.activations.backward_working_fixed_bytes = 4 * v;
  layer.activations.backward_working_elements = h;
  layer.matmul_flops_per_token = 2 * h * v;
  if (split.t > 1) {
    using K = TpCollectiveKind;
    if (split.sp) {
      // The gathered input (Megatron's global memory buffer), in forward and again in backward
      // for the weight gradient (LinearWithGradAccumulationAndAsyncCommunication), as the blocks'
      // column-parallel layers have it.
      layer.activations.forward_working_elements = h;
      layer.activations.backward_working_elements += h;
      layer.tp_forward.push_back({K::AllGather, h});
    }
    // Vocab-parallel cross-entropy (_VocabParallelCrossEntropy): the logits' maximum, the target
    // logit and the sum of exponentials, one fp32 value per token each.
    for (int i = 0; i < 3; ++i) layer.tp_forward.push_back({K::AllReduce, 1, true});
    if (split.sp) {
      layer.tp_backward.push_back({K::AllGather, h});
      layer.tp_backward.push_back({K::ReduceScatter, h});
    } else {
      layer.tp_backward.push_back({K::AllReduce, h});
    }
  }
  return layer;
}

void check_tensor_parallel(const TransformerShape& s, const TensorParallelism& tp) {
  auto require = [&](bool ok, const std::string& key, const std::string& why) {
    if (!ok) throw InputError(key, why);
  };
  require(tp.size >= 1 && tp.size <= 4096, "tensor_parallel.autotp_size",
          "must be between 1 and 4096 (got " + std::to_string(tp.size) + ")");
  require(tp.vocab_multiple >= 1, "tensor_parallel.vocab_multiple", "must be positive");
  if (!tp.active()) return;
  require(!s.moe && !s.mla, "--tp",
          "tensor parallelism of mixture-of-experts or latent-attention layers is not modelled; "
          "plan them with --tp 1 (and --ep for expert parallelism)");
  const std::string by =
      " must be divisible by the tensor-parallel size " + std::to_string(tp.size);
  require(s.heads % tp.size == 0, "model.heads",
          "the attention heads (" + std::to_string(s.heads) + ")" + by);
  require(s.kv_heads % tp.size == 0, "model.kv_heads",
          "the key/value heads (" + std::to_string(s.kv_heads) + ")" + by +
              " (Megatron: num_query_groups % tensor_model_parallel_size == 0)");
  require(s.ffn_hidden % tp.size == 0, "model.ffn_hidden",
          "the MLP width (" + std::to_string(s.ffn_hidden) + ")" + by);
}

}  // namespace

const char* to_string(TensorSplit split) {
  switch (split) {
    case TensorSplit::Replicated:
      return "replicated";
    case TensorSplit::Column:
      return "column";
    case TensorSplit::Row:
      return "row";
    case TensorSplit::Vocab:
      return "vocab";
  }
  return "replicated";
}

Model build_transformer(const std::string& name, const TransformerShape& shape,
                        const TensorParallelism& tp, const ExpertParallelism& ep) {
  shape.validate("model");
  if (shape.architecture != Architecture::Decoder) {
    if (tp.active())
      throw InputError("--tp", "tensor parallelism of " + shape.family + " (" +
                                   to_string(shape.architecture) + ") is not modelled");
    Model model = shape.architecture == Architecture::Encoder ? build_masked_lm(name, shape)
                                                              : build_encoder_decoder(name, shape);
    if (shape.lora.active()) apply_lora(model, shape);
    return model;
  }
  check_tensor_parallel(shape, tp);
  const Split split = make_split(shape, tp);
  Model model;
  model.name = name;
  model.shape = shape;
  model.tensor_parallel = tp;
  model.expert_parallel = ep;
  model.default_seq_len = shape.max_positions;
  model.layers.push_back(embedding_layer(shape, split));
  for (int i = 0; i < shape.layers; ++i) {
    model.layers.push_back(shape.moe || shape.mla ? mixture_block_layer(shape, i, ep)
                                                  : block_layer(shape, i, split));
  }
  model.layers.push_back(final_norm_layer(shape, split));
  model.layers.push_back(lm_head_layer(shape, 0, split));
  if (shape.lora.active()) apply_lora(model, shape);
  return model;
}

Model tensor_parallel_shard(const Model& model, const TensorParallelism& tp) {
  if (!tp.active()) return model;
  if (!model.shape) {
    throw InputError("--tp",
                     "tensor parallelism splits a transformer's matrices: model '" + model.name +
                         "' is a layer list without a transformer shape (use a preset, dense:N "
                         "or a Hugging Face config)");
  }
  Model shard = build_transformer(model.name, *model.shape, tp);
  shard.source = model.source;
  shard.default_seq_len = model.default_seq_len;
  return shard;
}

Model expert_parallel_shard(const Model& model, const ExpertParallelism& ep) {
  if (!ep.active()) return model;
  if (!model.shape || !model.shape->moe) {
    throw InputError("--ep", "expert parallelism splits a mixture-of-experts model's experts: "
                             "model '" + model.name + "' has none");
  }
  const int experts = model.shape->moe->experts;
  if (experts % ep.size != 0) {
    throw InputError("--ep", "the " + std::to_string(experts) +
                                 " experts of each MoE layer do not split over " +
                                 std::to_string(ep.size) +
                                 " ranks (DeepSpeed: num_experts % ep_size == 0)");
  }
  if (!(ep.capacity_factor > 0 && ep.capacity_factor <= 1024))
    throw InputError("--capacity-factor", "must be in (0, 1024]");
  if (ep.min_capacity < 0) throw InputError("--min-capacity", "must not be negative");
  Model shard = build_transformer(model.name, *model.shape, model.tensor_parallel, ep);
  shard.source = model.source;
  shard.default_seq_len = model.default_seq_len;
  return shard;
}

void partition_checkpoints(Model& model, int tensor_parallel) {
  if (tensor_parallel <= 1) return;
  for (auto& layer : model.layers) layer.activations.checkpoint_elements /= double(tensor_parallel);
}

Model pipeline_stage_model(const Model& model, const PipelineParallelism& pipeline, int stage) {
  const int chunks = pipeline.size * pipeline.virtual_stages;
  if (!model.shape) {
    throw InputError("--pp", "pipeline parallelism splits a transformer's blocks: model '" +
                                 model.name + "' is a layer list without a transformer shape");
  }
  if (model.shape->architecture != Architecture::Decoder) {
    throw InputError("--pp", "pipeline parallelism of " + model.shape->family + " (" +
                                 to_string(model.shape->architecture) + ") is not modelled");
  }
  const int blocks = model.shape->layers;
  if (blocks % chunks != 0) {
    throw InputError("--pp", "the model's " + std::to_string(blocks) +
                                 " blocks do not split into " + std::to_string(pipeline.size) +
                                 " stages x " + std::to_string(pipeline.virtual_stages) +
                                 " chunks of equal size (Megatron: num_layers divisible by "
                                 "pipeline stages x virtual stages)");
  }
  // The whole model's layers: embedding, blocks 1..blocks, final norm, LM head (as built from its
  // shape; a layer list that says otherwise cannot be split by its shape).
  const std::size_t first_block = 1, per_chunk = std::size_t(blocks / chunks);
  if (model.layers.size() != std::size_t(blocks) + 3 ||
      model.layers.front().kind != LayerKind::Embedding ||
      model.layers.back().kind != LayerKind::LmHead) {
    throw InputError("--pp",
                     "model '" + model.name +
                         "': its layers are not its transformer shape's (embedding, blocks, final "
                         "norm, LM head), so its stages cannot be split");
  }
  Model stage_model = model;
  stage_model.layers.clear();
  stage_model.pipeline = pipeline;
  stage_model.pipeline_stage = stage;
  for (int chunk = 0; chunk < pipeline.virtual_stages; ++chunk) {
    const int global = chunk * pipeline.size + stage;
    PipelineChunk range{.global_index = global, .first = stage_model.layers.size()};
    if (global == 0) stage_model.layers.push_back(model.layers.front());
    for (std::size_t b = 0; b < per_chunk; ++b) {
      stage_model.layers.push_back(model.layers[first_block + std::size_t(global) * per_chunk + b]);
    }
    if (global == chunks - 1) {
      for (std::size_t tail = first_block + std::size_t(blocks); tail < model.layers.size();
           ++tail) {
        stage_model.layers.push_back(model.layers[tail]);
      }
    }
    range.end = stage_model.layers.size();
    stage_model.pipeline_chunks.push_back(range);
  }
  // A tied LM head on a stage without the embedding holds its own copy of the word embeddings.
  for (auto& layer : stage_model.layers) {
    if (layer.shares_params_of < 0) continue;
    const Layer& owner = model.layers[std::size_t(layer.shares_params_of)];
    layer.shares_params_of = -1;
    layer.params.push_back(owner.params.front());
    layer.params.back().name = "lm_head.weight (copy of " + owner.params.front().name + ")";
    stage_model.tied_embedding_end = true;
  }
  if (stage == 0 && model.layers.back().shares_params_of >= 0)
    stage_model.tied_embedding_end = true;
  return stage_model;
}

Elements Model::parameter_count() const {
  Elements count = 0;
  for (const auto& layer : layers) count += layer.numel();
  return count;
}

Elements Model::expert_parameter_count() const {
  Elements count = 0;
  for (const auto& layer : layers) {
    for (const auto& tensor : layer.params) count += tensor.expert ? tensor.numel() : 0;
  }
  return count;
}

Elements Model::active_parameter_count() const {
  Elements count = 0;
  for (const auto& layer : layers) {
    Elements experts = 0;
    for (const auto& tensor : layer.params) {
      if (tensor.expert) {
        experts += tensor.numel();
      } else {
        count += tensor.numel();
      }
    }
    // Every expert of a layer has the same shape: a token uses top_k of them.
    if (layer.moe && layer.moe->local_experts > 0)
      count += experts / layer.moe->local_experts * std::min(layer.moe->top_k, layer.moe->local_experts);
  }
  return count;
}

Elements Model::trainable_parameter_count() const {
  Elements count = 0;
  for (const auto& layer : layers) count += layer.trainable_numel();
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

double Model::forward_flops_per_step(std::int64_t micro_batch, std::int64_t seq_len,
                                     std::int64_t target_len) const {
  double flops = 0;
  for (const auto& layer : layers) flops += layer.forward_flops(micro_batch, seq_len, target_len);
  return flops;
}

bool Model::has_target_sequence() const {
  return std::any_of(layers.begin(), layers.end(), [](const Layer& l) { return l.on_target; });
}

const char* to_string(Architecture architecture) {
  switch (architecture) {
    case Architecture::Decoder:
      return "decoder";
    case Architecture::Encoder:
      return "encoder";
    case Architecture::EncoderDecoder:
      return "encoder_decoder";
  }
  return "decoder";
}

}  // namespace zerolens
