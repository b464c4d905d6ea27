#pragma once
// GPT-2 for the executor: token and position embeddings, L blocks of [LayerNorm, causal multi-head
// self-attention, LayerNorm, GELU MLP] with residuals, final LayerNorm, LM head tied to the token
// embedding and softmax cross-entropy, on the CPU kernels, at any size sim's model describes
// (presets such as gpt2-tiny, or a Hugging Face GPT-2 config.json). A block's MLP may be a
// DeepSpeed MoE layer of GPT-2 MLP experts (the MoE GPT-2, gpt2-tiny-moe; exec/model/moe_layer.hpp),
// its experts exchanged over an expert-parallel group once connect_expert_parallel gives it one.
//
// Activations are allocated through the memory ledger and kept as sim's activation terms describe
// an eager framework keeping them (docs/memory-model.md), so measured and predicted activation
// memory can be compared: per block its norm outputs, q/k/v, softmax probabilities, attention
// output, the residual after attention, the MLP's GELU input and output, and the block output.
// Each layer allocates its output in forward and frees its input in backward. The training data is
// synthetic and learnable (see synthetic_sequence), a pure function of the seed and sample id.
// The layer steps are exec/model/gpt2_layers.hpp's, run here on the CPU kernels; options,
// architecture check, initial weights and corpus are exec/model/gpt2_shape.hpp's (both shared with
// the CUDA model, exec/cuda/gpt2_cuda_model.hpp).
#include <cstdint>
#include <memory>

#include "exec/memory/memory_ledger.hpp"
#include "exec/model/gpt2_shape.hpp"
#include "exec/model/layer_model.hpp"
#include "sim/model/model.hpp"

namespace zerolens::exec {

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
  void connect_tensor_parallel(TensorParallelChannel& channel) override;
  // Refuses a model without MoE blocks, and a group whose size and rank are not the share's
  // (model.expert_parallel.size, options.expert_parallel_rank).
  void connect_expert_parallel(Communicator& ep_group) override;
  void select_micro_batch(std::int32_t micro) override;
  std::span<float> receive_input(std::size_t layer) override;
  std::span<const float> output(std::size_t layer) override;
  void release_output(std::size_t layer) override;
  std::span<float> receive_output_grad() override;
  std::span<const float> input_grad() override;
  void release_input_grad() override;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace zerolens::exec
