// BERT, RoBERTa and T5 from their shape (docs/model-format.md, "BERT, RoBERTa, T5"; the activation
// terms: docs/memory-model.md, "Encoders and encoder-decoders").
#include "sim/model/encoder_models.hpp"

#include <algorithm>

#include "sim/core/error.hpp"

namespace zerolens {
namespace {

std::vector<std::int64_t> dims(std::initializer_list<std::int64_t> values) {
  return values;
}

// The blocks of a decoder of `count` blocks built from `shape`: the projections, norms and
// activation terms every family here shares.
std::vector<Layer> blocks_of(const TransformerShape& shape, int count) {
  TransformerShape decoder = shape;
  decoder.architecture = Architecture::Decoder;
  decoder.layers = count;
  decoder.lora = {};
  decoder.token_types = 0;
  decoder.decoder_layers = 0;
  decoder.relative_attention_buckets = 0;
  decoder.extra_params = 0;
  const Model model = build_transformer("blocks", decoder);
  return {model.layers.begin() + 1, model.layers.begin() + 1 + count};
}

// A block named `name`, its tensors following ("h.3.attn.q_proj.weight" -> "encoder.3.attn...").
Layer renamed(Layer layer, const std::string& name) {
  const std::size_t old = layer.name.size() + 1;
  for (TensorSpec& tensor : layer.params) tensor.name = name + "." + tensor.name.substr(old);
  layer.name = name;
  return layer;
}

// The LM head when the loss takes the logits in the activation dtype (BERT's and T5's
// nn.CrossEntropyLoss: log_softmax keeps its output in the logits' dtype): the input, the logits
// and their log-probabilities, the int64 labels; in backward the two v-wide gradients and the
// input's.
Layer loss_head(const TransformerShape& s, bool on_target) {
  const double h = double(s.hidden), v = double(s.vocab);
  Layer head{.name = "lm_head", .kind = LayerKind::LmHead};
  if (s.tied_embeddings) {
    head.shares_params_of = 0;
  } else {
    head.params.push_back({"lm_head.weight", dims({s.vocab, s.hidden})});
  }
  head.activations.elements = h + 2 * v;
  head.activations.fixed_bytes = 8;
  head.activations.checkpoint_elements = h;
  head.activations.backward_working_elements = 2 * v + h;
  head.matmul_flops_per_token = 2 * h * v;
  head.on_target = on_target;
  return head;
}

Layer bert_embedding(const TransformerShape& s) {
  const double h = double(s.hidden);
  Layer layer{.name = "embedding", .kind = LayerKind::Embedding};
  layer.params.push_back({"word_embeddings.weight", dims({s.vocab, s.hidden})});
  layer.params.push_back({"position_embeddings.weight", dims({s.max_positions, s.hidden})});
  if (s.token_types > 0)
    layer.params.push_back({"token_type_embeddings.weight", dims({s.token_types, s.hidden})});
  layer.params.push_back({"embeddings.LayerNorm.weight", dims({s.hidden})});
  layer.params.push_back({"embeddings.LayerNorm.bias", dims({s.hidden})});
  // int64 token ids for the word embedding's backward, and RoBERTa's position ids, made from them
  // per token (create_position_ids_from_input_ids; BERT's come from a buffer); the LayerNorm's
  // input and the dropout's mask.
  layer.activations.fixed_bytes = s.family == "roberta" ? 16 : 8;
  layer.activations.elements = h;
  if (s.dropout > 0) layer.activations.mask_bytes = h;
  layer.activations.backward_working_elements = h;
  return layer;
}

// The MLM head's transform (BertPredictionHeadTransform, RobertaLMHead: dense, GELU, LayerNorm)
// with the decoder's bias: it keeps the dense's input, the GELU's input and its output (the
// LayerNorm's input); the LayerNorm's output is the head's input.
Layer mlm_transform(const TransformerShape& s) {
  const double h = double(s.hidden);
  Layer layer{.name = "mlm_transform", .kind = LayerKind::FinalNorm};
  layer.params.push_back({"mlm.dense.weight", dims({s.hidden, s.hidden})});
  layer.params.push_back({"mlm.dense.bias", dims({s.hidden})});
  layer.params.push_back({"mlm.LayerNorm.weight", dims({s.hidden})});
  layer.params.push_back({"mlm.LayerNorm.bias", dims({s.hidden})});
  layer.params.push_back({"mlm.decoder.bias", dims({s.vocab})});
  layer.activations.elements = 3 * h;
  layer.activations.checkpoint_elements = h;
  layer.activations.backward_working_elements = 2 * h;
  layer.matmul_flops_per_token = 2 * h * h;
  return layer;
}

// ---- T5 ------------------------------------------------------------------------------------
// What T5's blocks keep beyond the shared terms: its attention takes the softmax in fp32
// (softmax(scores.float()).type_as(scores), whose fp32 output the softmax's backward keeps, its
// 16-bit copy or dropout output feeding the value product), and its feed-forward has a dropout
// between wi and wo (T5DenseActDense, T5DenseGatedActDense), whose mask it keeps.
void t5_terms(Layer& block, const TransformerShape& s) {
  const double a = double(s.heads);
  block.activations.elements_per_position = a;
  block.activations.fixed_bytes_per_position = 4 * a;
  if (s.dropout > 0) block.activations.mask_bytes += double(s.ffn_hidden);
}

// The relative position buckets (T5Attention.relative_attention_bias), in the first block of a
// stack, after its attention's projections.
void add_relative_bias(Layer& block, const TransformerShape& s) {
  const auto after =
      std::find_if(block.params.begin(), block.params.end(),
                   [](const TensorSpec& t) { return t.name.ends_with(".attn.o_proj.weight"); });
  block.params.insert(after + 1, TensorSpec{block.name + ".attn.relative_attention_bias.weight",
                                            dims({s.relative_attention_buckets, s.heads})});
}

// A decoder block's cross-attention (T5LayerCrossAttention), between its self-attention and its
// feed-forward: a norm, q over the decoder's sequence, k and v over the encoder's output, o. It
// keeps the norm's input and output (q's input), the queries, the encoder output's keys and values
// (per source token), the scores' fp32 softmax and dropout (per source position) and o's input, and
// its output's dropout mask.
void add_cross_attention(Layer& block, const TransformerShape& s) {
  const std::int64_t inner = std::int64_t(s.heads) * s.effective_head_dim();
  const auto second_norm =
      std::find_if(block.params.begin(), block.params.end(),
                   [](const TensorSpec& t) { return t.name.ends_with(".ln_2.weight"); });
  const std::string p = block.name + ".cross.";
  block.params.insert(second_norm, {TensorSpec{p + "norm.weight", dims({s.hidden})},
                                    TensorSpec{p + "q_proj.weight", dims({inner, s.hidden})},
                                    TensorSpec{p + "k_proj.weight", dims({inner, s.hidden})},
                                    TensorSpec{p + "v_proj.weight", dims({inner, s.hidden})},
                                    TensorSpec{p + "o_proj.weight", dims({s.hidden, inner})}});
  const double d = double(s.hidden), q = double(inner), a = double(s.heads);
  ActivationTerms& t = block.activations;
  t.elements += d + d + q + q;
  if (s.dropout > 0) {
    t.mask_bytes += d;
    t.mask_bytes_per_source_position += a;
  }
  t.source_elements += 2 * q;
  t.elements_per_source_position += a;
  t.fixed_bytes_per_source_position += 4 * a;
  t.backward_working_elements_per_source_position += a;
  block.matmul_flops_per_token += 2 * (2 * d * q);         // q and o
  block.source_matmul_flops_per_token += 2 * (2 * d * q);  // k and v of the encoder's output
  block.attention_flops_per_token_source_position += 4 * q;
}

Layer t5_embedding(const TransformerShape& s, bool decoder) {
  Layer layer{.name = decoder ? "decoder.embedding" : "embedding", .kind = LayerKind::Embedding};
  if (decoder) {
    layer.shares_params_of = 0;  // the shared input embedding
    layer.on_target = true;
  } else {
    layer.params.push_back({"shared.weight", dims({s.vocab, s.hidden})});
  }
  layer.activations.fixed_bytes = 8;  // the token ids
  if (s.dropout > 0) layer.activations.mask_bytes = double(s.hidden);
  layer.activations.backward_working_elements = double(s.hidden);
  return layer;
}

// A stack's final norm and dropout. The encoder's output is kept besides: every decoder block's
// k and v projections read it.
Layer t5_final_norm(const TransformerShape& s, bool decoder) {
  const double d = double(s.hidden);
  Layer layer{.name = decoder ? "decoder.final_norm" : "encoder.final_norm",
              .kind = LayerKind::FinalNorm};
  layer.params.push_back({layer.name + ".weight", dims({s.hidden})});
  layer.activations.elements = decoder ? d : 2 * d;
  if (s.dropout > 0) layer.activations.mask_bytes = d;
  layer.activations.backward_working_elements = 2 * d;
  layer.on_target = decoder;
  return layer;
}

}  // namespace

Model build_masked_lm(const std::string& name, const TransformerShape& shape) {
  Model model;
  model.name = name;
  model.shape = shape;
  model.default_seq_len = shape.max_positions;
  model.layers.push_back(bert_embedding(shape));
  for (Layer& block : blocks_of(shape, shape.layers)) model.layers.push_back(std::move(block));
  model.layers.push_back(mlm_transform(shape));
  model.layers.push_back(loss_head(shape, false));
  return model;
}

Model build_encoder_decoder(const std::string& name, const TransformerShape& shape) {
  if (shape.attention != AttentionImpl::Eager)
    throw InputError("--attention",
                     "T5's relative position bias is added to the scores, which "
                     "transformers' T5 computes in eager attention only");
  Model model;
  model.name = name;
  model.shape = shape;
  model.default_seq_len = shape.max_positions;
  model.layers.push_back(t5_embedding(shape, false));
  const auto stack = [&](int count, bool decoder) {
    std::vector<Layer> blocks = blocks_of(shape, count);
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      Layer block = renamed(blocks[i], (decoder ? "decoder." : "encoder.") + std::to_string(i));
      t5_terms(block, shape);
      if (i == 0) add_relative_bias(block, shape);
      if (decoder) {
        add_cross_attention(block, shape);
        block.on_target = true;
      }
      model.layers.push_back(std::move(block));
    }
    model.layers.push_back(t5_final_norm(shape, decoder));
  };
  stack(shape.layers, false);
  model.layers.push_back(t5_embedding(shape, true));
  stack(shape.decoder_layers, true);
  model.layers.push_back(loss_head(shape, true));
  return model;
}

}  // namespace zerolens
