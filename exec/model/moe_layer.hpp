#pragma once
// A mixture-of-experts MLP as DeepSpeed's MoE layer runs it with expert parallelism
// (deepspeed/moe/sharded_moe.py MOELayer.forward; docs/parallelism.md): a router [E, h], E GPT-2
// MLP experts (fc_in [f, h] + bias, GELU, fc_out [h, f] + bias) of which this rank holds the E / ep
// of its place in the expert-parallel group, and the real all-to-alls over that group: the
// [E, C, h] dispatch buffer out to the experts' ranks and their outputs back in forward, the
// gradients the same way in backward. C is sim's MoeRouting capacity (one formula for the plan
// and the run); without an EP group the layer is dropless (C = tokens: every route computed), as
// Hugging Face's blocks are.
//
// Not yet part of a LayerModel: the engine's ZeRO over two groups (expert parameters over the
// expert-data-parallel group) and a MoE GPT-2 the engine trains are still to come
// (docs/parallelism.md); its buffers are plain vectors, not charged to the memory ledger.
#include <cstdint>
#include <span>
#include <vector>

#include "exec/comm/communicator.hpp"
#include "kernels/moe.hpp"
#include "sim/model/moe_shape.hpp"

namespace zerolens::exec {

struct MoeLayerShape {
  std::size_t hidden = 0, ffn = 0;
  int experts = 0, top_k = 1;
  double capacity_factor = 1.0;
  int min_capacity = 4;
};

class ExpertParallelMoe {
 public:
  // `ep_group`: this rank's expert-parallel group (nullptr or one rank: every expert here); it
  // must outlive the layer. `seed` makes the weights a function of each expert's global index.
  ExpertParallelMoe(const MoeLayerShape& shape, Communicator* ep_group, std::uint64_t seed);

  // y[tokens, h] from x[tokens, h] (this rank's tokens); keeps what backward needs.
  std::vector<float> forward(std::span<const float> x, std::size_t tokens);
  // Returns dx; ACCUMULATES the router's and this rank's experts' gradients.
  std::vector<float> backward(std::span<const float> dy);

  // The routing sim plans for `tokens` tokens of this rank (capacity, exchange bytes).
  const MoeRouting& routing() const { return routing_; }
  std::size_t capacity() const { return capacity_; }
  int local_experts() const { return local_experts_; }
  int first_expert() const { return first_expert_; }
  // Parameters and gradients: the router, then per local expert fc_in weight, fc_in bias, fc_out
  // weight, fc_out bias.
  std::span<float> router() { return router_; }
  std::span<float> router_grad() { return router_grad_; }
  std::span<float> expert(int local) { return experts_[std::size_t(local)]; }
  std::span<float> expert_grad(int local) { return expert_grads_[std::size_t(local)]; }
  std::size_t expert_size() const {
    return shape_.ffn * shape_.hidden * 2 + shape_.ffn + shape_.hidden;
  }

 private:
  void exchange(std::span<const float> input, std::span<float> output);
  void experts_forward();
  void experts_backward(std::span<const float> doutput, std::span<float> dinput);

  MoeLayerShape shape_;
  Communicator* ep_;
  int ep_size_ = 1, local_experts_ = 0, first_expert_ = 0;
  MoeRouting routing_;
  std::size_t tokens_ = 0, capacity_ = 0;
  std::vector<float> router_, router_grad_;
  std::vector<std::vector<float>> experts_, expert_grads_;
  // Kept for backward: the input, the routes, the rows the local experts received [ep, E/ep, C,
  // h], their fc_in outputs and GELU outputs, and the experts' outputs returned to this rank's
  // tokens [E, C, h].
  std::vector<float> x_, received_, hidden_, activated_, returned_;
  kernels::MoeRoutes routes_;
};

}  // namespace zerolens::exec
