#pragma once
// Gpt2Model's internals (exec/gpt2_*.cpp only): per-layer activation buffers and the layer
// dispatch's state (dimensions and parameter order: exec/gpt2_shape.hpp).
#include <vector>

#include "exec/gpt2_model.hpp"

namespace zerolens::exec {

struct BlockActivations : Gpt2BlockBuffers<TrackedBuffer<float>> {
  void allocate(MemoryLedger& ledger, Component component, const Gpt2Dims& d, HeldAs held);
};

// Column block `block` (0 q, 1 k, 2 v) of a fused [rows, 3 x width] tensor to or from a [rows,
// width] one: the attention kernel wants q, k and v fused; sim's model has three projections.
void copy_to_fused(float* fused, const float* part, std::size_t block, std::size_t rows, std::size_t width);
void copy_from_fused(float* part, const float* fused, std::size_t block, std::size_t rows, std::size_t width);

struct Gpt2Model::State {
  State(const Model& model, const Gpt2Options& options, MemoryLedger& ledger);
  State(const Model& model, const Gpt2Options& options, MemoryLedger& ledger, Gpt2Layout layout);

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
  Gpt2Corpus corpus;
  TrackedBuffer<std::int32_t> tokens, targets;  // kept by the embedding and the head
  std::vector<TrackedBuffer<float>> outputs;    // per layer: its output [rows, C] (not the head's)
  std::vector<BlockActivations> blocks;         // per layer (used by blocks only)
  TrackedBuffer<float> lnf_mean, lnf_rstd;
  TrackedBuffer<float> logits, probs, losses;   // the head's
  TrackedBuffer<float> dresidual;               // gradient of the residual stream during backward
  double loss = 0;
};

}  // namespace zerolens::exec
