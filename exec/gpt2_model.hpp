#pragma once
// GPT-2 for the executor: token and position embeddings, L blocks of [LayerNorm, causal multi-head
// self-attention, LayerNorm, GELU MLP] with residuals, final LayerNorm, LM head tied to the token
// embedding and softmax cross-entropy, on the CPU kernels, at any size sim's model describes
// (presets such as gpt2-tiny, or a Hugging Face GPT-2 config.json).
//
// Activations are allocated through the memory ledger and kept as sim's activation terms describe
// an eager framework keeping them (docs/memory-model.md), so measured and predicted activation
// memory can be compared: per block its norm outputs, q/k/v, softmax probabilities, attention
// output, the residual after attention, the MLP's GELU input and output, and the block output.
// Each layer allocates its output in forward and frees its input in backward. The training data is
// synthetic and learnable (see synthetic_token), a pure function of the seed and sample id.
#include <cstdint>
#include <memory>
#include <vector>

#include "exec/layer_model.hpp"
#include "exec/memory_ledger.hpp"
#include "sim/model.hpp"

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
};

class Gpt2Model final : public LayerModel {
 public:
  // Throws InputError naming what does not fit: a non-GPT-2 architecture (RMSNorm, SwiGLU, grouped
  // or flash attention, untied or bias-free projections), dropout (the executor trains without it),
  // a sequence longer than the position table.
  Gpt2Model(const Model& model, const Gpt2Options& options, MemoryLedger& ledger);
  ~Gpt2Model() override;
  Gpt2Model(const Gpt2Model&) = delete;
  Gpt2Model& operator=(const Gpt2Model&) = delete;

  void init_tensor(std::int32_t tensor, std::span<float> values) const override;
  void load_batch(std::int64_t first_sample, std::int64_t count) override;
  void forward(std::size_t layer, ParamViews params) override;
  void recompute(std::size_t layer, ParamViews params) override;
  void backward(std::size_t layer, ParamViews params, GradViews grads, float scale) override;
  double loss() const override;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// The synthetic corpus: the first `length` tokens of sample `sample` (the inputs and, shifted by
// one, the targets). Each sample starts at a random token and follows a fixed random permutation
// of the vocabulary, except that 1 token in 8 is replaced by a random one: a next-token rule a
// model can learn, with an entropy floor so the loss cannot reach zero.
std::vector<std::int32_t> synthetic_sequence(std::uint64_t seed, std::int64_t vocab, std::int64_t sample,
                                             std::int64_t length);

}  // namespace zerolens::exec
