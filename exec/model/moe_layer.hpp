#pragma once
// A mixture-of-experts MLP as DeepSpeed's MoE layer runs it with expert parallelism
// (deepspeed/moe/sharded_moe.py MOELayer.forward; docs/parallelism.md): a router [E, h]
// (TopKGate.wg), E GPT-2 MLP experts (fc_in [f, h] + bias, GELU, fc_out [h, f] + bias) of which
// this rank holds the E / ep of its place in the expert-parallel group, and the real all-to-alls
// over that group: the [E, C, h] dispatch buffer out to the experts' ranks and their outputs back
// in forward, the gradients the same way in backward. C is sim's MoeRouting capacity (one formula
// for the plan and the run); without an EP group the layer is dropless (C = tokens: every route
// computed, no row padded), as Hugging Face's blocks are.
//
// Its parameters and gradients are the caller's (the engine's ParamViews and GradViews in the MoE
// GPT-2, exec/model/gpt2_layers.hpp): the router, then per local expert fc_in weight, fc_in bias,
// fc_out weight, fc_out bias. What it keeps from forward to backward is charged to the memory
// ledger (the `kept` component), its transient buffers as working activations; the routes
// (indices and gates, a few values per token) are plain vectors. Without an EP group (dropless)
// each expert computes only the rows routed to it (top-k x tokens rows in all, as sim's
// MoeRouting::rows plans); with one, the [E, C, h] buffer's rows, padding included.
#include <cstdint>
#include <span>
#include <vector>

#include "exec/comm/communicator.hpp"
#include "exec/memory/memory_ledger.hpp"
#include "exec/model/layer_model.hpp"
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
  // must outlive the layer. Buffers are charged to `ledger` (its Gpu device), those kept for
  // backward as `kept`.
  // `held`: the bytes per element the ledger counts (the plan's activation dtype; the rest is
  // scratch, as the GPT-2 model's fp32 activations are counted).
  ExpertParallelMoe(const MoeLayerShape& shape, Communicator* ep_group, MemoryLedger& ledger,
                    Component kept = Component::ActivationsStored, HeldAs held = HeldAs{4});

  // y[tokens, h] (overwritten) from x[tokens, h] (this rank's tokens); keeps what backward needs
  // and reads x again in backward (the caller keeps it: the block's ln_2 output).
  void forward(std::span<const float> x, std::size_t tokens, ParamViews params, std::span<float> y);
  // ACCUMULATES dx and the router's and this rank's experts' gradients (`grads`, in the order of
  // the parameters) given dy; frees what forward kept.
  void backward(std::span<const float> dy, ParamViews params, GradViews grads, std::span<float> dx);

  // The routing sim plans for `tokens` tokens of this rank (capacity, exchange bytes).
  const MoeRouting& routing() const { return routing_; }
  std::size_t capacity() const { return capacity_; }
  int local_experts() const { return local_experts_; }
  int first_expert() const { return first_expert_; }
  // Parameter tensors: 1 router + 4 per local expert.
  std::size_t parameter_tensors() const { return 1 + 4 * std::size_t(local_experts_); }

  // GPT-2's initial weights of the standalone layer (tests): N(0, 0.02) from a generator per
  // tensor group, the router's from `seed`, global expert e's from seed + 1 + e, zero biases.
  static void initialise_router(std::span<float> router, std::uint64_t seed);
  static void initialise_expert(std::span<float> fc_in_weight, std::span<float> fc_in_bias,
                                std::span<float> fc_out_weight, std::span<float> fc_out_bias,
                                std::uint64_t seed, int global_expert);

 private:
  using Buffer = TrackedBuffer<float>;
  Buffer buffer(Component component, std::size_t count) const;
  void exchange(std::span<const float> input, std::span<float> output);
  void experts_forward(ParamViews params);
  void experts_backward(ParamViews params, GradViews grads, std::span<const float> doutput,
                        std::span<float> dinput);
  void check_params(ParamViews params, std::size_t grads) const;
  void combine_backward(std::span<const float> dy, std::span<float> dreturned,
                        std::span<float> dgate) const;
  struct Rows {
    std::size_t first = 0, count = 0;
  };
  std::vector<Rows> rows_of(std::size_t local) const;
  std::size_t packed_row(std::size_t route) const;

  MoeLayerShape shape_;
  Communicator* ep_;
  MemoryLedger* ledger_;
  Component kept_;
  HeldAs held_;
  int ep_size_ = 1, local_experts_ = 0, first_expert_ = 0;
  MoeRouting routing_;
  std::size_t tokens_ = 0, capacity_ = 0;
  // Kept for backward: the rows the local experts received (with EP [ep, E/ep, C, h]; dropless
  // the routed rows packed by expert, [top-k x tokens, h]), their fc_in outputs and GELU outputs,
  // and the experts' outputs returned to this rank's tokens (with EP [E, C, h]); the routes, and
  // dropless each expert's first packed row. The input is the caller's.
  std::span<const float> x_;
  Buffer received_, hidden_, activated_, returned_;
  kernels::MoeRoutes routes_;
  std::vector<std::size_t> offsets_;
};

}  // namespace zerolens::exec
