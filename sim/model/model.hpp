#pragma once
// Model description: a list of layers with named parameter tensors and, per layer, the activation
// memory kept for backward as a function of micro-batch b and sequence length s.
//
// Activation terms follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
// Transformer Models", Sec. 4.1) for a transformer block without tensor parallelism:
// 34*s*b*h + 5*a*s^2*b bytes with 16-bit activations, 1-byte dropout masks and eager attention.
// The terms are generalised to grouped-query attention, gated (SwiGLU) MLPs, no dropout and
// flash attention; see docs/memory-model.md for the term-by-term list.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/config/parallelism.hpp"
#include "sim/core/units.hpp"
#include "sim/model/moe_shape.hpp"

namespace zerolens {

enum class LayerKind { Embedding, TransformerBlock, FinalNorm, LmHead, Generic };
enum class AttentionImpl { Eager, Flash };
enum class NormKind { LayerNorm, RmsNorm };
enum class MlpKind { Gelu, SwiGlu };

const char* to_string(LayerKind kind);
const char* to_string(AttentionImpl impl);
AttentionImpl parse_attention_impl(const std::string& text);  // "eager" | "flash"

// How tensor parallelism holds a parameter (Megatron-LM's layers, Shoeybi et al. 2019): split
// along its output rows (ColumnParallelLinear), its input columns (RowParallelLinear) or the
// vocabulary (VocabParallelEmbedding), or whole on every rank of the group.
enum class TensorSplit : std::uint8_t { Replicated, Column, Row, Vocab };
const char* to_string(TensorSplit split);

// How a parameter tensor is stored. Nf4 and Nf4DoubleQuant: QLoRA's frozen base weights as
// bitsandbytes keeps them (functional.py quantize_4bit, blocksize 64): two 4-bit NormalFloat codes
// a byte, packed into elements of the training dtype (quant_storage, which ZeRO-3 partitions like
// any parameter), plus the quantization constants (sim/model/lora.hpp).
enum class WeightFormat : std::uint8_t { TrainingDtype, Nf4, Nf4DoubleQuant };
const char* to_string(WeightFormat format);

struct TensorSpec {
  std::string name;
  std::vector<std::int64_t> shape;  // this rank's shard (the whole tensor without TP)
  TensorSplit split = TensorSplit::Replicated;
  // Under sequence parallelism a replicated tensor whose gradient each TP rank computes from its
  // own part of the sequence (norms, row-parallel biases): Megatron all-reduces these gradients
  // over the TP group after the backward (finalize_model_grads, _allreduce_layernorm_grads).
  bool sequence_parallel_grad = false;
  // A routed expert's parameter (sim/model/moe_shape.hpp): under expert parallelism each rank
  // holds its EP rank's experts, data-parallel over the expert-data-parallel group.
  bool expert = false;
  // False: frozen (LoRA's base model): no gradient, no fp32 master copy, no optimizer state.
  bool trainable = true;
  WeightFormat format = WeightFormat::TrainingDtype;
  Elements numel() const;
};

// One collective a layer issues over its tensor-parallel group per micro-batch (the f/g operators
// of Megatron's layers), in the order issued.
enum class TpCollectiveKind : std::uint8_t { AllReduce, AllGather, ReduceScatter };
struct TpCollective {
  TpCollectiveKind kind = TpCollectiveKind::AllReduce;
  // The message (nccl-tests' size: the whole buffer: an all-gather's output, a reduce-scatter's
  // input) in elements per token of the micro-batch.
  double elements_per_token = 0;
  bool fp32 = false;  // fp32 whatever the activation dtype (the vocab-parallel loss's statistics)
};

// Activation memory of one layer, per token of the micro-batch. For micro-batch b, sequence s and
// an activation element size e (2 for fp16/bf16, 4 for fp32):
//   stored(b, s) = b*s*( e*elements + mask_bytes + s*(e*elements_per_position + mask_bytes_per_position)
//                        + fixed_bytes )
// "fixed" bytes do not scale with the activation dtype (fp32 log-probabilities, int64 token ids,
// the fp32 log-sum-exp of flash attention).
struct ActivationTerms {
  double elements = 0;
  double mask_bytes = 0;
  double elements_per_position = 0;
  double mask_bytes_per_position = 0;
  double fixed_bytes = 0;
  // What an activation checkpoint keeps instead of `stored` (the layer's input), elements per token.
  double checkpoint_elements = 0;
  // Transient working set beyond `stored` during this layer's forward (e.g. the fp32 copy of the
  // logits for the loss), bytes per token independent of dtype plus elements per token.
  double forward_working_elements = 0;
  double forward_working_fixed_bytes = 0;
  // Transient gradient buffers alive during this layer's backward, elements per token (plus
  // per-position elements for eager attention score gradients) and fixed bytes.
  double backward_working_elements = 0;
  double backward_working_elements_per_position = 0;
  double backward_working_fixed_bytes = 0;
  // Casts that exist only with 16-bit activations (e < 4): a transient fp32 copy of this many
  // elements per token in forward (4 bytes each), and a cast back to the activation dtype of this
  // many in backward (e bytes each). With fp32 activations there is nothing to cast.
  double forward_upcast_elements = 0;
  double backward_downcast_elements = 0;
  // Bytes per position of the own sequence that do not scale with the activation dtype (T5's
  // softmax, taken in fp32).
  double fixed_bytes_per_position = 0;
  // An encoder-decoder's cross-attention (a decoder layer): per token of the layer's own (target)
  // sequence and position of the source sequence, elements, dtype-independent bytes and mask bytes
  // (the scores, their fp32 softmax, dropout), and per token of the source the elements the layer
  // keeps of the encoder's output (its keys and values); the score gradient in backward.
  double elements_per_source_position = 0;
  double fixed_bytes_per_source_position = 0;
  double mask_bytes_per_source_position = 0;
  double source_elements = 0;
  double backward_working_elements_per_source_position = 0;
};

struct ActivationBytes {
  Bytes stored = 0;            // kept for backward without checkpointing
  Bytes checkpoint = 0;        // kept for backward with checkpointing
  Bytes forward_working = 0;   // transient during forward
  Bytes backward_working = 0;  // transient during backward
};

struct Layer {
  std::string name;
  LayerKind kind = LayerKind::Generic;
  std::vector<TensorSpec> params;  // parameters this layer owns
  int shares_params_of = -1;       // index of the layer whose parameters it uses (tied LM head)
  ActivationTerms activations;
  // Forward FLOPs per token: 2 x (weight elements used in matrix products), plus attention
  // score/value products of 4*h per token per position (no causal discount, as in Megatron/PaLM).
  double matmul_flops_per_token = 0;
  double attention_flops_per_token_position = 0;
  // Encoder-decoders: the layer runs over the target (decoder) sequence instead of the source; its
  // cross-attention's score/value products per token and source position, and its key and value
  // projections of the encoder output per source token.
  bool on_target = false;
  double attention_flops_per_token_source_position = 0;
  double source_matmul_flops_per_token = 0;
  // The part of matmul_flops_per_token whose weights are frozen: their backward computes the
  // input's gradient only (half of a trainable matmul's two products).
  double frozen_matmul_flops_per_token = 0;
  double frozen_source_matmul_flops_per_token = 0;
  // Tensor parallelism: what the forward (repeated by a recompute) and the backward issue.
  std::vector<TpCollective> tp_forward, tp_backward;
  // A mixture-of-experts layer: the rows its experts compute follow from the micro-batch's tokens
  // (not linearly: DeepSpeed's capacity), and with expert parallelism it exchanges them.
  std::optional<MoeRouting> moe;

  Elements numel() const;
  // `seq_len` is the step's sequence (an encoder-decoder's source); `target_len` the decoder's
  // (0: seq_len), which layers on_target run over.
  ActivationBytes activation_bytes(std::int64_t micro_batch, std::int64_t seq_len,
                                   Bytes activation_element_bytes,
                                   std::int64_t target_len = 0) const;
  double forward_flops(std::int64_t micro_batch, std::int64_t seq_len,
                       std::int64_t target_len = 0) const;
  // 2 x forward, less the weight gradients of frozen matmuls.
  double backward_flops(std::int64_t micro_batch, std::int64_t seq_len,
                        std::int64_t target_len = 0) const;
  // The sequence the layer runs over: seq_len, or target_len for a decoder layer of an
  // encoder-decoder.
  std::int64_t own_len(std::int64_t seq_len, std::int64_t target_len) const {
    return on_target && target_len > 0 ? target_len : seq_len;
  }
  // Parameters with gradients (LoRA: the adapters).
  Elements trainable_numel() const;
};

// LoRA (Hu et al. 2021) as PEFT applies it: every parameter frozen, and on each target module a
// trainable pair A [rank x in], B [out x rank] beside its weight. With `base_format` a 4-bit format
// the frozen linear weights of the blocks are stored quantized (QLoRA, Dettmers et al. 2023).
struct LoraConfig {
  int rank = 0;  // 0: off (every parameter trained)
  // PEFT module names (q_proj, v_proj, c_attn, all-linear, ...); empty: PEFT's default for the
  // family (sim/model/lora.hpp).
  std::vector<std::string> targets;
  WeightFormat base_format = WeightFormat::TrainingDtype;
  // PEFT's lora_dropout (default 0: nn.Identity). Above 0 each adapter keeps its own dropout mask
  // and output for backward instead of sharing the module's input.
  double dropout = 0;
  bool active() const { return rank > 0; }
};

// What a transformer is: decoder-only (GPT, LLaMA and the families built like it), an encoder with
// a masked-LM head (BERT, RoBERTa), or an encoder-decoder (T5, mT5).
enum class Architecture : std::uint8_t { Decoder, Encoder, EncoderDecoder };
const char* to_string(Architecture architecture);

// Shape of a transformer; presets, Hugging Face configs and dense:N all build from it.
struct TransformerShape {
  std::string family = "gpt2";  // "gpt2", "llama", "dense"
  int layers = 12;
  std::int64_t hidden = 768;
  int heads = 12;
  int kv_heads = 12;          // grouped-query attention when < heads
  std::int64_t head_dim = 0;  // 0: hidden / heads
  std::int64_t ffn_hidden = 3072;
  std::int64_t vocab = 50257;
  std::int64_t max_positions = 1024;
  bool learned_positions = true;  // GPT-2 wpe; LLaMA uses RoPE (no parameters)
  bool tied_embeddings = true;
  bool qkv_bias = true;
  bool out_proj_bias = true;
  bool mlp_bias = true;
  NormKind norm = NormKind::LayerNorm;  // LayerNorm has weight+bias, RMSNorm weight only
  // Qwen3, Gemma 3: an RMSNorm over each head's queries and keys (a head_dim weight each).
  bool qk_norm = false;
  // Gemma 2 and 3: the attention and MLP outputs normed again before the residual add (four
  // norms a block: input, post-attention, pre-feedforward, post-feedforward).
  bool sandwich_norms = false;
  MlpKind mlp = MlpKind::Gelu;
  double dropout = 0.1;
  AttentionImpl attention = AttentionImpl::Eager;
  // One extra 1-D parameter tensor of this many elements in the final norm layer (dense:N uses it to
  // make the count exact).
  std::int64_t extra_params = 0;
  // Mixture of experts (the MLP of its MoE layers) and multi-head latent attention: DeepSeek,
  // Mixtral, Qwen2-MoE, Qwen3-MoE (sim/model/moe.cpp builds their blocks).
  std::optional<MoeShape> moe;
  std::optional<MlaShape> mla;
  // Fine-tuning with LoRA adapters (off by default); build_transformer applies it.
  LoraConfig lora;
  // Encoders and encoder-decoders (sim/model/encoder_models.hpp). BERT's token-type embeddings
  // (type_vocab_size; 0: none); T5's decoder blocks (num_decoder_layers) and its relative position
  // buckets (relative_attention_num_buckets), one table of buckets x heads in the first block of
  // each stack.
  Architecture architecture = Architecture::Decoder;
  std::int64_t token_types = 0;
  int decoder_layers = 0;
  std::int64_t relative_attention_buckets = 0;
  // The loss upcasts the logits to fp32 (transformers' ForCausalLMLoss: logits.float()), or takes
  // them in the activation dtype (BERT's and T5's nn.CrossEntropyLoss on the logits as they are).
  bool loss_in_fp32 = true;

  std::int64_t effective_head_dim() const { return head_dim > 0 ? head_dim : hidden / heads; }
  // Throws InputError(where, why) when a dimension is invalid.
  void validate(const std::string& where) const;
};

// One model chunk of a pipeline stage: chunk `global_index` of the pipeline's size x
// virtual_stages chunks in layer order (it runs on stage global_index % size), made of the stage
// model's layers [first, end).
struct PipelineChunk {
  int global_index = 0;
  std::size_t first = 0, end = 0;
};

struct Model {
  std::string name;
  // The tensor parallelism this model is one rank's shard of (size 1: the whole model).
  TensorParallelism tensor_parallel;
  // The pipeline stage this model is (pipeline.size 1: the whole model, no chunks), its chunks in
  // the order of their layers, and whether it holds one end of a tied embedding split over the
  // first and last stage (Megatron keeps a copy of the word embeddings on the last stage and
  // all-reduces the two copies' gradients: _allreduce_word_embedding_grads).
  PipelineParallelism pipeline;
  // The expert parallelism this model is one rank's share of (size 1: every expert).
  ExpertParallelism expert_parallel;
  int pipeline_stage = 0;
  std::vector<PipelineChunk> pipeline_chunks;
  bool tied_embedding_end = false;
  std::string source;  // "preset", "dense", "hf-config", "layers-json"
  std::vector<Layer> layers;
  std::optional<TransformerShape> shape;  // set for transformer models
  std::int64_t default_seq_len = 1024;

  Elements parameter_count() const;  // each parameter once (tied weights counted once)
  // The parameters one token's forward uses: all but the routed experts it is not sent to (each
  // MoE layer's expert parameters x top_k / experts held). The embedding table counts whole.
  Elements active_parameter_count() const;
  // The routed experts' parameters (those expert parallelism splits).
  Elements expert_parameter_count() const;
  Elements trainable_parameter_count() const;  // those with gradients (all but LoRA's base)
  Elements largest_layer_params() const;
  double forward_flops_per_step(std::int64_t micro_batch, std::int64_t seq_len,
                                std::int64_t target_len = 0) const;
  // Whether some layer runs over a target sequence (an encoder-decoder).
  bool has_target_sequence() const;
};

// The model, or with `tp` the shard one rank of a tensor-parallel group holds (parameters,
// activations, FLOPs and the TP collectives per layer; docs/parallelism.md). Throws InputError when
// the shape does not split (heads, key/value heads or the MLP width not divisible by tp.size).
Model build_transformer(const std::string& name, const TransformerShape& shape,
                        const TensorParallelism& tp = {}, const ExpertParallelism& ep = {});
// `model` as one rank of `ep` holds it: the model itself when ep is inactive, else rebuilt from
// its shape with the first experts / ep.size experts of each MoE layer (rank 0's; every EP rank
// holds as many) and DeepSpeed's capacity routing. Throws InputError when the model has no
// experts or they do not split (DeepSpeed: num_experts % ep_size == 0).
Model expert_parallel_shard(const Model& model, const ExpertParallelism& ep);
// `model` as one rank of `tp` holds it: the model itself when tp is inactive, else rebuilt from its
// transformer shape (a layer-list model without one cannot be split: InputError).
Model tensor_parallel_shard(const Model& model, const TensorParallelism& tp);
// DeepSpeed's activation_checkpointing.partition_activations over `tensor_parallel` ranks: every
// checkpoint kept 1/tensor_parallel per rank (checkpointing.py: partition_activations,
// get_partition_size = numel / mp_size); the recompute gathers it back (the schedule's all-gather).
// Nothing changes without tensor parallelism.
void partition_checkpoints(Model& model, int tensor_parallel);
// Stage `stage` of `model` split by `pipeline` (Megatron's layout): the transformer blocks in
// size x virtual_stages equal chunks, chunk g on stage g % size; the embedding before chunk 0, the
// final norm and LM head after the last. Throws InputError when the blocks do not split evenly or
// the model has no transformer shape.
Model pipeline_stage_model(const Model& model, const PipelineParallelism& pipeline, int stage);
}  // namespace zerolens
