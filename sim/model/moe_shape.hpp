#pragma once
// Mixture-of-experts and multi-head latent attention shapes (Mixtral, Qwen2-MoE, Qwen3-MoE,
// DeepSeek-V2/V3; docs/model-format.md), and the routing facts of one MoE layer that the
// activations, FLOPs and expert-parallel exchanges follow from (docs/parallelism.md, "Mixture of
// experts").
#include <cstdint>
#include <vector>

#include "sim/core/units.hpp"

namespace zerolens {

// The feed-forward part of a mixture-of-experts transformer. Each MoE layer has a router
// ([experts, h]), `experts` routed experts of width `expert_ffn` of which each token visits
// `top_k`, and optionally shared experts every token visits (one MLP of width `shared_ffn`). An
// expert is the shape's MLP kind (SwiGLU in the Hugging Face families; GPT-2's GELU MLP with
// biases in the MoE GPT-2, gpt2-tiny-moe). The other layers keep a dense MLP of ffn_hidden.
struct MoeShape {
  int experts = 0;              // num_local_experts (Mixtral), num_experts, n_routed_experts
  int top_k = 1;                // num_experts_per_tok
  std::int64_t expert_ffn = 0;  // moe_intermediate_size (Mixtral: intermediate_size)
  std::int64_t shared_ffn = 0;  // DeepSeek: n_shared_experts x moe_intermediate_size; Qwen2-MoE:
                                // shared_expert_intermediate_size; 0: none
  bool shared_expert_gate = false;  // Qwen2-MoE: a sigmoid gate ([1, h]) on the shared expert
  bool router_bias = false;    // DeepSeek-V3's noaux_tc router: e_score_correction_bias [experts]
  int first_dense_layers = 0;  // first_k_dense_replace (DeepSeek)
  int sparse_step = 1;         // decoder_sparse_step (Qwen): MoE where (layer + 1) % step == 0
  std::vector<int> dense_layers;  // mlp_only_layers (Qwen)

  bool is_moe_layer(int layer) const;
  int moe_layer_count(int layers) const;
  bool operator==(const MoeShape&) const = default;
};

// DeepSeek's multi-head latent attention (DeepseekV2Attention): queries through a low-rank
// q_a_proj / q_a_layernorm / q_b_proj (or one q_proj when q_lora_rank is 0: V2-Lite), keys and
// values through kv_a_proj_with_mqa (the compressed kv plus one shared rotary key) /
// kv_a_layernorm / kv_b_proj; the head's query and key are qk_nope + qk_rope wide, its value
// v_head_dim.
struct MlaShape {
  std::int64_t q_lora_rank = 0;
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t qk_nope_head_dim = 0;
  std::int64_t v_head_dim = 0;
  std::int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool operator==(const MlaShape&) const = default;
};

// One MoE layer's routing as a rank runs it. Without expert parallelism (Hugging Face's sparse MoE
// blocks) it is dropless: every token's top_k copies are computed, top_k x tokens rows. With it,
// DeepSpeed's MOELayer dispatches an [experts, capacity, h] buffer over the EP group; the rank's
// experts compute the rows every EP rank sent them, experts x capacity rows in all (padding
// included), and combine them back (sharded_moe.py MOELayer.forward).
struct MoeRouting {
  int experts = 0;        // routed experts of the layer (all ranks)
  int local_experts = 0;  // held by this rank: experts / expert_parallel
  int top_k = 1;
  int expert_parallel = 1;  // ranks of the EP group; 1: dropless, no exchange
  double capacity_factor = 1.0;
  int min_capacity = 4;
  std::int64_t hidden = 0;
  // Per row an expert computes: activation elements kept for backward, transient elements of the
  // forward and of the backward, and forward matrix-product FLOPs.
  double row_elements = 0;
  double row_forward_working_elements = 0;
  double row_backward_working_elements = 0;
  double row_flops = 0;
  // Per token: kept elements the combine's backward releases before the rows' backward runs
  // (autograd frees a node's saved tensors once its backward ran), so they are not alive beside
  // the rows' working set.
  double token_released_elements = 0;

  bool exchanges() const { return expert_parallel > 1; }
  // DeepSpeed's _capacity (sharded_moe.py) for topkgating's capacity_factor x k: ceil(tokens /
  // experts x capacity_factor x k) in float32, at least min_capacity. 0 without exchange.
  std::int64_t capacity(std::int64_t tokens) const;
  // Rows this rank's experts compute for `tokens` tokens of its micro-batch.
  std::int64_t rows(std::int64_t tokens) const;
  // Elements of the dispatched [experts, capacity, h] buffer each all-to-all exchanges (the
  // whole buffer: each rank sends a 1/expert_parallel share to each EP rank). 0 without exchange.
  Elements exchange_elements(std::int64_t tokens) const;
};

}  // namespace zerolens
