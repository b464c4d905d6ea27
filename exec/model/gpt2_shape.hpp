#pragma once
// What the executor's GPT-2 models share, whatever they compute on (Gpt2Model on the CPU kernels,
// CudaGpt2Model in exec/cuda/ on the GPU's): the options, the architecture check, the dimensions
// and parameter order, the initial weights and the synthetic corpus (their layer steps:
// exec/model/gpt2_layers.hpp). One definition, so both models refuse the same descriptions and
// start from the same numbers on the same data.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sim/model/model.hpp"

namespace zerolens::exec {

struct Gpt2Options {
  std::int64_t micro_batch = 1;
  std::int64_t seq_len = 64;
  bool checkpointing = false;  // keep only block outputs; rebuild the rest in recompute()
  std::uint64_t seed = 1234;   // data and initial weights
  // Bytes per activation element in the plan (2 with fp16/bf16 training). The fp32 kernels keep
  // every activation in fp32; the ledger counts this many bytes per element and the rest as
  // scratch, and the head casts as a 16-bit implementation does (an fp32 copy of the logits for the
  // loss, a 16-bit copy of their gradient).
  std::int64_t activation_element_bytes = 4;
  // Tensor parallelism: this rank's index in its TP group (the model is its shard: sim's
  // tensor_parallel_shard, whose TensorParallelism gives the group's size and SP).
  int tensor_parallel_rank = 0;
  // Expert parallelism: this rank's index in its EP group (the model is its share: sim's
  // expert_parallel_shard, whose ExpertParallelism gives the group's size and capacity).
  int expert_parallel_rank = 0;
};

// The whole model's sizes, and what one rank of a TP group holds of them (tp 1: everything).
struct Gpt2Dims {
  std::size_t batch = 0, seq_len = 0, channels = 0, heads = 0, ffn = 0, vocab = 0, blocks = 0;
  std::size_t tp = 1, tp_rank = 0;
  bool sp = false;  // sequence parallelism: the residual stream split along the tokens
  // This rank's rows of the token embedding (the vocabulary padded to a multiple of the group
  // under TP) and the first of them.
  std::size_t shard_vocab = 0, vocab_first = 0;
  // A MoE GPT-2 (gpt2-tiny-moe): the experts of each MoE block (all ranks), the top-k, the
  // experts' width, and the expert-parallel group's size and this rank's place in it; its
  // TopKGate capacity (sim's ExpertParallelism).
  std::size_t experts = 0, top_k = 0, expert_ffn = 0, ep = 1, ep_rank = 0;
  double capacity_factor = 1.0;
  int min_capacity = 4;
  std::size_t local_experts() const { return ep > 0 ? experts / ep : 0; }
  std::size_t rows() const { return batch * seq_len; }
  // Per rank: the attention heads, q/k/v width and MLP width (Megatron's column splits).
  std::size_t heads_here() const { return heads / tp; }
  std::size_t width_here() const { return channels / tp; }
  std::size_t ffn_here() const { return ffn / tp; }
  std::size_t scores() const { return batch * heads_here() * seq_len * seq_len; }
  // Token rows of the residual stream this rank holds: all, or its 1/tp of them under SP (rank r
  // the r-th run of consecutive rows of the [batch, seq_len] micro-batch).
  std::size_t stream_rows() const { return sp ? rows() / tp : rows(); }
  std::size_t first_stream_row() const { return sp ? tp_rank * stream_rows() : 0; }
  // Of this rank's vocabulary rows, those below the real vocabulary (the rest pad it).
  std::size_t vocab_valid() const {
    return vocab_first >= vocab ? 0 : std::min(shard_vocab, vocab - vocab_first);
  }
};

// Parameter positions within a block's views, in sim's tensor order (checked by gpt2_layout).
enum BlockParam : std::size_t {
  kLn1Weight, kLn1Bias, kQWeight, kQBias, kKWeight, kKBias, kVWeight, kVBias, kOWeight, kOBias,
  kLn2Weight, kLn2Bias, kFcInWeight, kFcInBias, kFcOutWeight, kFcOutBias, kBlockParams
};
// A MoE block (Gpt2Role::MoeBlock): the 12 tensors before the MLP as a block has them, then the
// router [E, h] (DeepSpeed's TopKGate.wg) and per local expert fc_in weight, fc_in bias, fc_out
// weight, fc_out bias (sim/model/moe.cpp's order).
inline constexpr std::size_t kMoeRouter = kFcInWeight;
inline constexpr std::size_t kMoeBlockParams(std::size_t local_experts) {
  return kMoeRouter + 1 + 4 * local_experts;
}

enum class Gpt2Role { Embedding, Block, MoeBlock, FinalNorm, Head };

struct Gpt2Layout {
  Gpt2Dims dims;
  std::vector<Gpt2Role> roles;  // one per layer of the model
};

// The dimensions and layer roles of `model` trained at `options`. Throws InputError naming what
// does not fit: a non-GPT-2 architecture (RMSNorm, SwiGLU, grouped or flash attention, untied or
// bias-free projections), dropout (the executor trains without it), a sequence longer than the
// position table, a layer or parameter not where GPT-2 has it.
Gpt2Layout gpt2_layout(const Model& model, const Gpt2Options& options);

// GPT-2's initialisation of parameter tensor `tensor` (sim's numbering of unshared tensors): a
// function of the seed, the tensor id and the element's place in the whole tensor only, so a TP
// shard (rank `tensor_parallel_rank` of model.tensor_parallel) starts as its slice of the whole
// model. Throws std::out_of_range when there is no such tensor.
// A routed expert's tensor starts as the whole model's tensor of its global expert index (EP rank
// r holds experts r x E/ep ..), so every EP size starts from the same model.
void gpt2_init_tensor(const Model& model, std::uint64_t seed, std::int32_t tensor,
                      std::span<float> values, int tensor_parallel_rank = 0,
                      int expert_parallel_rank = 0);

// Throws InputError naming `model_name` when `model` has mixture-of-experts blocks (a model whose
// layer steps do not run them: the CUDA model).
void refuse_mixture_of_experts(const Model& model, const std::string& model_name);

// Element `index` of a TP shard's tensor `spec` (rank `rank` of `size`) as an element of the whole
// tensor: a column or vocabulary split holds a block of whole rows, a row split the same block of
// every row's columns (Megatron's ColumnParallelLinear, VocabParallelEmbedding,
// RowParallelLinear), a replicated tensor all of it.
std::int64_t whole_element(const TensorSpec& spec, int size, int rank, std::int64_t index);

// The synthetic corpus of `seed` over `vocab` tokens (see synthetic_sequence).
class Gpt2Corpus {
 public:
  Gpt2Corpus(std::uint64_t seed, std::int64_t vocab);
  // Inputs and targets (the inputs shifted by one) of samples first_sample .. first_sample +
  // batch - 1, row-major [batch, seq_len] each.
  void fill_batch(std::int64_t first_sample, std::size_t batch, std::size_t seq_len,
                  std::span<std::int32_t> tokens, std::span<std::int32_t> targets) const;

 private:
  std::uint64_t seed_;
  std::vector<std::int32_t> permutation_;  // the next-token rule
};

// The synthetic corpus: the first `length` tokens of sample `sample` (the inputs and, shifted by
// one, the targets). Each sample starts at a random token and follows a fixed random permutation
// of the vocabulary, except that 1 token in 8 is replaced by a random one: a next-token rule a
// model can learn, with an entropy floor so the loss cannot reach zero.
std::vector<std::int32_t> synthetic_sequence(std::uint64_t seed, std::int64_t vocab, std::int64_t sample,
                                             std::int64_t length);

}  // namespace zerolens::exec
