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
  // Tensor parallelism: what the forward (repeated by a recompute) and the backward issue.
  std::vector<TpCollective> tp_forward, tp_backward;
  // A mixture-of-experts layer: the rows its experts compute follow from the micro-batch's tokens
  // (not linearly: DeepSpeed's capacity), and with expert parallelism it exchanges them.
  std::optional<MoeRouting> moe;

  Elements numel() const;
  ActivationBytes activation_bytes(std::int64_t micro_batch, std::int64_t seq_len,
                                   Bytes activation_element_bytes) const;
  double forward_flops(std::int64_t micro_batch, std::int64_t seq_len) const;
};

// Shape of a decoder-only transformer; presets, Hugging Face configs and dense:N all build from it.
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
  Elements largest_layer_params() const;
  double forward_flops_per_step(std::int64_t micro_batch, std::int64_t seq_len) const;
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
