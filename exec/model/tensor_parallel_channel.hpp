#pragma once
// The tensor-parallel group's collectives as a model's layers issue them, where the maths needs
// them: Megatron's f and g operators around the parallel regions (all-reduce; all-gather and
// reduce-scatter along the sequence with SP) and the vocab-parallel loss's statistics. Buffers are
// fp32 in the model's memory (host memory on the CPU backend). The engine's channel
// (exec/engine/tensor_parallel_ops.hpp) runs each call as the next TP op the schedule lists after
// the layer's compute op, holding kind and bytes to it.
#include <span>

namespace zerolens::exec {

class TensorParallelChannel {
 public:
  virtual ~TensorParallelChannel() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Activations and their gradients, on the wire in the activation dtype (16-bit runs round them
  // first, as a 16-bit model's tensors are).
  virtual void all_reduce(std::span<float> values) = 0;
  // `whole` is size() x `block`, in rank order.
  virtual void all_gather(std::span<const float> block, std::span<float> whole) = 0;
  virtual void reduce_scatter(std::span<const float> whole, std::span<float> block) = 0;
  // The loss's per-token statistics: fp32 whatever the activation dtype.
  virtual void all_reduce_max_fp32(std::span<float> values) = 0;
  virtual void all_reduce_sum_fp32(std::span<float> values) = 0;
};

}  // namespace zerolens::exec
