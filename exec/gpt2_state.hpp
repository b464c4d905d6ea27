#pragma once
// Gpt2Model's internals (exec/gpt2_*.cpp only): dimensions, per-layer activation buffers and the
// parameter order of sim's GPT-2 layers.
#include <vector>

#include "exec/gpt2_model.hpp"

namespace zerolens::exec {

struct Gpt2Dims {
  std::size_t batch = 0, seq_len = 0, channels = 0, heads = 0, ffn = 0, vocab = 0, blocks = 0;
  std::size_t rows() const { return batch * seq_len; }
  std::size_t scores() const { return batch * heads * seq_len * seq_len; }
};

// Parameter positions within a block's views, in sim's tensor order (checked at construction).
enum BlockParam : std::size_t {
  kLn1Weight, kLn1Bias, kQWeight, kQBias, kKWeight, kKBias, kVWeight, kVBias, kOWeight, kOBias,
  kLn2Weight, kLn2Bias, kFcInWeight, kFcInBias, kFcOutWeight, kFcOutBias, kBlockParams
};

// What a block keeps for backward besides its input (the previous layer's output).
struct BlockActivations {
  TrackedBuffer<float> ln1, ln1_mean, ln1_rstd, qkv, att, atty, mid, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
  void allocate(MemoryLedger& ledger, Component component, const Gpt2Dims& d, HeldAs held);
  void release();
};

// Column block `block` (0 q, 1 k, 2 v) of a fused [rows, 3 x width] tensor to or from a [rows,
// width] one: the attention kernel wants q, k and v fused; sim's model has three projections.
void copy_to_fused(float* fused, const float* part, std::size_t block, std::size_t rows, std::size_t width);
void copy_from_fused(float* part, const float* fused, std::size_t block, std::size_t rows, std::size_t width);

enum class Gpt2Role { Embedding, Block, FinalNorm, Head };

struct Gpt2Model::State {
  State(const Model& model, const Gpt2Options& options, MemoryLedger& ledger);

  // gpt2_forward.cpp
  void embedding_forward(ParamViews params);
  void block_forward(std::size_t layer, ParamViews params, bool recomputing);
  void final_norm_forward(std::size_t layer, ParamViews params);
  void head_forward(ParamViews params);
  // gpt2_backward.cpp
  void embedding_backward(GradViews grads);
  void block_backward(std::size_t layer, ParamViews params, GradViews grads);
  void final_norm_backward(std::size_t layer, ParamViews params, GradViews grads);
  void head_backward(std::size_t layer, ParamViews params, GradViews grads, float scale);

  // An activation (counted at the plan's activation dtype) and an fp32 buffer in any precision.
  TrackedBuffer<float> activation(Component component, std::size_t count) {
    return {ledger, Device::Gpu, component, count, held()};
  }
  TrackedBuffer<float> fp32(Component component, std::size_t count) { return {ledger, Device::Gpu, component, count}; }
  TrackedBuffer<float> working(std::size_t count) { return activation(Component::ActivationWorking, count); }
  HeldAs held() const { return {std::size_t(options.activation_element_bytes)}; }
  bool sixteen_bit() const { return options.activation_element_bytes < 4; }
  TrackedBuffer<float> zeroed_working(std::size_t count);

  const Model& model;
  Gpt2Options options;
  MemoryLedger& ledger;
  Gpt2Dims dims;
  std::vector<Gpt2Role> roles;
  std::vector<std::int32_t> permutation;        // the synthetic corpus's next-token rule
  TrackedBuffer<std::int32_t> tokens, targets;  // kept by the embedding and the head
  std::vector<TrackedBuffer<float>> outputs;    // per layer: its output [rows, C] (not the head's)
  std::vector<BlockActivations> blocks;         // per layer (used by blocks only)
  TrackedBuffer<float> lnf_mean, lnf_rstd;
  TrackedBuffer<float> logits, probs, losses;   // the head's
  TrackedBuffer<float> dresidual;               // gradient of the residual stream during backward
  double loss = 0;
};

}  // namespace zerolens::exec
