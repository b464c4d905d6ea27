#pragma once
// The engine's TensorParallelChannel (internal to exec/): the collectives a layer issues inside its
// forward, recompute or backward run as the schedule's TP ops that follow that compute op (sim's
// builder emits a layer's tp_forward / tp_backward collectives right after it), one after the
// other on the TP communicator. Each must be the next op's kind, message bytes and wire dtype
// (std::logic_error naming both otherwise): the schedule decides what crosses the group, the
// model only when. Activations travel in the training dtype (16-bit runs round the fp32 kernels'
// values to it, as a 16-bit model's tensors are), the loss's statistics in fp32.
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "exec/engine/context.hpp"
#include "exec/model/tensor_parallel_channel.hpp"

namespace zerolens::exec {

class TensorParallelOps final : public TensorParallelChannel {
 public:
  using Clock = std::chrono::steady_clock;
  explicit TensorParallelOps(EngineContext& context);

  int rank() const override;
  int size() const override;
  void all_reduce(std::span<float> values) override;
  void all_gather(std::span<const float> block, std::span<float> whole) override;
  void reduce_scatter(std::span<const float> whole, std::span<float> block) override;
  void all_reduce_max_fp32(std::span<float> values) override;
  void all_reduce_sum_fp32(std::span<float> values) override;

  // Times of ops are seconds from `start`, the step's start.
  void begin_step(Clock::time_point start);
  // Before compute op `index`: the TP ops right after it (its layer's, on the TP group) become the
  // ones its layer runs, in order. After it, end_layer checks that all of them ran.
  void begin_layer(std::size_t index);
  void end_layer();
  // Whether op `index` ran inside its layer this step, and from when to when.
  bool ran(std::size_t index) const { return ran_.at(index); }
  double start(std::size_t index) const { return starts_.at(index); }
  double end(std::size_t index) const { return ends_.at(index); }

 private:
  // The next op of the layer, checked against what the layer asks (kind, bytes, element size).
  std::size_t next(OpKind kind, Bytes bytes, Bytes element, const char* call);
  void done(std::size_t index, Clock::time_point begin);
  double seconds(Clock::time_point at) const;
  // A 16-bit copy of `values` (scratch: the fp32 kernels hold the 16-bit tensor wider), and back.
  std::span<std::uint16_t> narrow(std::span<const float> values, PlacedBytes& bits) const;
  void widen(std::span<const std::uint16_t> bits, std::span<float> values) const;

  EngineContext& ctx_;
  Communicator* comm_;
  Precision dtype_;
  Bytes element_;
  Clock::time_point step_start_{};
  std::size_t next_ = 0, end_ = 0;  // the current layer's ops: [next_, end_)
  std::vector<bool> ran_;
  std::vector<double> starts_, ends_;
};

}  // namespace zerolens::exec
