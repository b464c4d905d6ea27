#pragma once
// Transformers that are not decoder-only, built from their shape (docs/model-format.md, "BERT,
// RoBERTa, T5"): BERT and RoBERTa trained as masked LMs (transformers' BertForMaskedLM,
// RobertaForMaskedLM), T5 and mT5 as encoder-decoders (T5ForConditionalGeneration). Their blocks
// are the decoder blocks' (the same projections, norms and activation terms: a post-LN block keeps
// as many tensors as a pre-LN one), with what each family adds.
#include <string>

#include "sim/model/model.hpp"

namespace zerolens {

// BERT / RoBERTa (shape.architecture Encoder): embeddings (word, learned positions, token types,
// LayerNorm), post-LN blocks, the MLM head's transform (dense, GELU, LayerNorm) and its decoder,
// tied to the word embeddings, with a bias of its own. No pooler: the MLM model has none.
Model build_masked_lm(const std::string& name, const TransformerShape& shape);

// T5 / mT5 (shape.architecture EncoderDecoder): the shared embedding, the encoder's blocks and
// final norm over the source sequence, then the decoder's embedding lookup, blocks (self-attention,
// cross-attention over the encoder's output, feed-forward) and final norm and the LM head over the
// target sequence (Layer::on_target). No biases; RMS norms; relative position buckets in the
// first block of each stack; attention eager (transformers' T5 has no flash path).
Model build_encoder_decoder(const std::string& name, const TransformerShape& shape);

}  // namespace zerolens
