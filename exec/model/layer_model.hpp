#pragma once
// What the ZeRO engine needs of a model: forward, recompute and backward of one layer at a time on
// the current micro-batch, given that layer's full parameter tensors in the order sim's model lists
// them. Parameters and gradients belong to the engine (which partitions, gathers and reduces them);
// activations belong to the model, which allocates them through the same memory ledger.
#include <cstdint>
#include <span>
#include <stdexcept>

#include "exec/model/tensor_parallel_channel.hpp"

namespace zerolens::exec {

class Communicator;

using ParamViews = std::span<const std::span<const float>>;
using GradViews = std::span<const std::span<float>>;

class LayerModel {
 public:
  virtual ~LayerModel() = default;
  // Initial values of a parameter tensor: a function of the tensor id only, so every rank agrees.
  virtual void init_tensor(std::int32_t tensor, std::span<float> values) const = 0;
  // The samples of the next micro-step on this rank: global sample ids first .. first + count - 1.
  virtual void load_batch(std::int64_t first_sample, std::int64_t count) = 0;
  virtual void forward(std::size_t layer, ParamViews params) = 0;
  // Activation checkpointing: rebuild what backward needs from the layer's checkpointed input.
  virtual void recompute(std::size_t layer, ParamViews params) { forward(layer, params); }
  // Adds scale x d(mean loss of the micro-batch)/d(params) to `grads`.
  virtual void backward(std::size_t layer, ParamViews params, GradViews grads, float scale) = 0;
  // Mean loss of the current micro-batch (valid after the last layer's forward).
  virtual double loss() const = 0;
  // Pipeline parallelism. The micro-batch the next calls are about: a stage runs other
  // micro-batches between one's forward and its backward (1F1B), each keeping its own activations.
  virtual void select_micro_batch(std::int32_t /*micro*/) {}
  // The activation entering `layer` (the first of a chunk) from the stage before: allocated, to
  // receive into. The activation leaving `layer` (a chunk's last), to send, and its release once
  // the send has its copy.
  virtual std::span<float> receive_input(std::size_t layer) { return missing_pipeline(layer); }
  virtual std::span<const float> output(std::size_t layer) { return missing_pipeline(layer); }
  virtual void release_output(std::size_t layer) { missing_pipeline(layer); }
  // The gradient of a chunk's output from the stage after (allocated, to receive into, before
  // the backward of its last layer), and that of its input (after the backward of its first
  // layer, to send), and its release.
  virtual std::span<float> receive_output_grad() { return missing_pipeline(0); }
  virtual std::span<const float> input_grad() { return missing_pipeline(0); }
  virtual void release_input_grad() { missing_pipeline(0); }
  // Tensor parallelism: the channel this shard's layers issue their TP collectives through
  // (the engine's; it outlives the model's use of it). A model without TP refuses.
  virtual void connect_tensor_parallel(TensorParallelChannel& /*channel*/) {
    throw std::logic_error("this model does not run tensor parallelism");
  }
  // Expert parallelism: the group (DeepSpeed's expert-parallel group: ProcessGroups::expert())
  // whose ranks hold the other experts of each MoE layer and exchange tokens by all-to-all; it
  // outlives the model's use of it. Called before the first forward when the model is a share of
  // sim's expert_parallel_shard (ep > 1). A model without MoE blocks refuses.
  virtual void connect_expert_parallel(Communicator& /*ep_group*/) {
    throw std::logic_error("this model does not run expert parallelism");
  }

 private:
  static std::span<float> missing_pipeline(std::size_t) {
    throw std::logic_error("this model does not run pipeline parallelism");
  }
};

}  // namespace zerolens::exec
