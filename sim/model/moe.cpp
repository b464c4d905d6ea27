// Blocks of the mixture-of-experts families and of the MoE GPT-2 (docs/model-format.md) and their
// routing (docs/parallelism.md, "Mixture of experts"). Parameters follow the Hugging Face modeling files
// (modeling_mixtral.py, modeling_qwen2_moe.py, modeling_qwen3_moe.py, modeling_deepseek_v2/v3.py);
// the activation terms are the tensors autograd keeps in those blocks (dropless, no expert
// parallelism) or in DeepSpeed's MOELayer and TopKGate (deepspeed/moe/sharded_moe.py, with it).
#include "sim/model/moe.hpp"

#include <algorithm>
#include <cmath>

#include "sim/core/error.hpp"

namespace zerolens {

bool MoeShape::is_moe_layer(int layer) const {
  if (experts <= 0 || layer < first_dense_layers || (layer + 1) % sparse_step != 0) return false;
  return std::find(dense_layers.begin(), dense_layers.end(), layer) == dense_layers.end();
}

int MoeShape::moe_layer_count(int layers) const {
  int count = 0;
  for (int layer = 0; layer < layers; ++layer) count += is_moe_layer(layer) ? 1 : 0;
  return count;
}

std::int64_t MoeRouting::capacity(std::int64_t tokens) const {
  if (!exchanges()) return 0;
  // _capacity: (num_tokens / num_experts) is a Python float, capacity_factor x k a float32 tensor,
  // so the product and its ceiling are float32's.
  const float per_expert = float(double(tokens) / double(experts));
  const float factor = float(capacity_factor * double(top_k));
  const auto capacity = std::int64_t(std::ceil(per_expert * factor));
  return std::max<std::int64_t>(capacity, min_capacity);
}

std::int64_t MoeRouting::rows(std::int64_t tokens) const {
  return exchanges() ? std::int64_t(experts) * capacity(tokens) : std::int64_t(top_k) * tokens;
}

Elements MoeRouting::exchange_elements(std::int64_t tokens) const {
  return exchanges() ? checked_mul(std::int64_t(experts) * capacity(tokens), hidden) : 0;
}

void validate_mixture(const TransformerShape& s, const std::string& where) {
  auto require = [&](bool ok, const std::string& key, const std::string& why) {
    if (!ok) throw InputError(where.empty() ? key : where + "." + key, why);
  };
  if (s.moe) {
    const MoeShape& m = *s.moe;
    require(m.experts >= 1 && m.experts <= (1 << 16), "moe.experts", "must be between 1 and 65536");
    require(m.top_k >= 1 && m.top_k <= m.experts, "moe.top_k",
            "must be between 1 and the " + std::to_string(m.experts) + " experts");
    require(m.expert_ffn >= 1 && m.expert_ffn <= (1 << 24), "moe.expert_ffn",
            "must be between 1 and 2^24");
    require(m.shared_ffn >= 0 && m.shared_ffn <= (1 << 24), "moe.shared_ffn",
            "must be between 0 and 2^24");
    require(m.first_dense_layers >= 0 && m.first_dense_layers <= s.layers, "moe.first_dense_layers",
            "must be between 0 and the layers");
    require(m.sparse_step >= 1 && m.sparse_step <= s.layers, "moe.sparse_step",
            "must be between 1 and the layers");
    for (const int layer : m.dense_layers) {
      require(layer >= 0 && layer < s.layers, "moe.dense_layers", "names a layer the model lacks");
    }
    // Far beyond any real model (DeepSeek-V3: 58 x 256 experts of 7168 x 2048), and what keeps the
    // model's tensors countable and its parameter count inside 64 bits.
    require(std::int64_t(m.experts) * s.layers <= (1 << 17), "moe.experts",
            "x the layers must be at most 2^17 (got " + std::to_string(m.experts) + " x " +
                std::to_string(s.layers) + ")");
    require(s.hidden * std::max(m.expert_ffn, m.shared_ffn) <= (std::int64_t(1) << 36),
            "moe.expert_ffn", "x the hidden size must be at most 2^36");
  }
  if (s.mla) {
    const MlaShape& a = *s.mla;
    const std::int64_t rank_limit = 1 << 20, head_limit = 1 << 16;
    require(a.q_lora_rank >= 0 && a.q_lora_rank <= rank_limit, "mla.q_lora_rank",
            "must be between 0 (no low-rank query) and 2^20");
    require(a.kv_lora_rank >= 1 && a.kv_lora_rank <= rank_limit, "mla.kv_lora_rank",
            "must be between 1 and 2^20");
    require(a.qk_rope_head_dim >= 0 && a.qk_rope_head_dim <= head_limit, "mla.qk_rope_head_dim",
            "must be between 0 and 2^16");
    require(a.qk_nope_head_dim >= 0 && a.qk_nope_head_dim <= head_limit, "mla.qk_nope_head_dim",
            "must be between 0 and 2^16");
    require(a.qk_head_dim() >= 1, "mla.qk_nope_head_dim",
            "and qk_rope_head_dim must not both be 0");
    require(a.v_head_dim >= 1 && a.v_head_dim <= head_limit, "mla.v_head_dim",
            "must be between 1 and 2^16");
  }
}

namespace {

using Shape = std::vector<std::int64_t>;

void add(std::vector<TensorSpec>& params, const std::string& name, Shape shape,
         bool expert = false) {
  TensorSpec tensor{.name = name, .shape = std::move(shape)};
  tensor.expert = expert;
  params.push_back(std::move(tensor));
}

// nn.Linear(in, out): weight [out, in], and a bias of out.
void add_linear(std::vector<TensorSpec>& params, const std::string& name, std::int64_t in,
                std::int64_t out, bool bias, bool expert = false) {
  add(params, name + ".weight", {out, in}, expert);
  if (bias) add(params, name + ".bias", {out}, expert);
}

// A gated (SwiGLU) MLP of width f: gate_proj, up_proj [f, h] and down_proj [h, f], no biases in
// any MoE family (Mixtral names them w1, w3, w2).
void add_swiglu(std::vector<TensorSpec>& params, const std::string& prefix, std::int64_t h,
                std::int64_t f, bool expert = false) {
  add_linear(params, prefix + ".gate_proj", h, f, false, expert);
  add_linear(params, prefix + ".up_proj", h, f, false, expert);
  add_linear(params, prefix + ".down_proj", f, h, false, expert);
}

// What one part of the block adds: parameters, activation terms per token, and forward
// matrix-product weights (FLOPs are 2 per weight per token).
struct Part {
  double inside = 0;                 // activation elements kept for backward
  double fixed_bytes = 0;            // kept, independent of the activation dtype
  double forward_working_fixed = 0;  // transient in forward, bytes
  double backward_working = 0;       // transient in backward, elements
  double matmul_weights = 0;
  double attention_flops_per_position = 0;
};

// Grouped-query attention as modeling_llama's (q/k/v/o, Qwen's biases, Qwen3's q/k norms): the
// terms of model.cpp's block_activations without tensor parallelism.
Part standard_attention(const TransformerShape& s, const std::string& prefix, Layer& layer) {
  const std::int64_t h = s.hidden, d = s.effective_head_dim();
  const std::int64_t q = std::int64_t(s.heads) * d, kv = std::int64_t(s.kv_heads) * d;
  add_linear(layer.params, prefix + ".attn.q_proj", h, q, s.qkv_bias);
  add_linear(layer.params, prefix + ".attn.k_proj", h, kv, s.qkv_bias);
  add_linear(layer.params, prefix + ".attn.v_proj", h, kv, s.qkv_bias);
  if (s.qk_norm) {
    add(layer.params, prefix + ".attn.q_norm.weight", {d});
    add(layer.params, prefix + ".attn.k_norm.weight", {d});
  }
  add_linear(layer.params, prefix + ".attn.o_proj", q, h, s.out_proj_bias);
  Part part;
  // Q and K, V, the output projection's input; a QK norm keeps the queries and keys it normalises.
  part.inside = double(q + kv) + double(kv) + double(q) + (s.qk_norm ? double(q + kv) : 0);
  part.matmul_weights = double(h) * double(q + 2 * kv) + double(q) * double(h);
  part.attention_flops_per_position = 4 * double(q);
  return part;
}

// DeepSeek's MLA (modeling_deepseek_v2.py DeepseekV2Attention). Kept for backward: the low-rank
// query's q_a output and normed input to q_b (2 q_lora), kv_a's output (the compressed kv and the
// rotary key, kv_lora + rope) and kv_b's normed input (kv_lora), kv_b's output (heads x (nope +
// v): the values are a view of it), the assembled queries and keys (heads x qk each) and the
// attention output (heads x v). Scores and values: 2 heads (qk + v) FLOPs per token and position.
Part latent_attention(const TransformerShape& s, const std::string& prefix, Layer& layer) {
  const MlaShape& a = *s.mla;
  const std::int64_t h = s.hidden, heads = s.heads;
  const std::int64_t q = heads * a.qk_head_dim(),
                     kv_up = heads * (a.qk_nope_head_dim + a.v_head_dim);
  const std::int64_t kv_down = a.kv_lora_rank + a.qk_rope_head_dim, out = heads * a.v_head_dim;
  Part part;
  if (a.q_lora_rank > 0) {
    add_linear(layer.params, prefix + ".attn.q_a_proj", h, a.q_lora_rank, s.qkv_bias);
    add(layer.params, prefix + ".attn.q_a_layernorm.weight", {a.q_lora_rank});
    add_linear(layer.params, prefix + ".attn.q_b_proj", a.q_lora_rank, q, false);
    part.inside += 2 * double(a.q_lora_rank);
    part.matmul_weights += double(h) * double(a.q_lora_rank) + double(a.q_lora_rank) * double(q);
  } else {
    add_linear(layer.params, prefix + ".attn.q_proj", h, q, false);
    part.matmul_weights += double(h) * double(q);
  }
  add_linear(layer.params, prefix + ".attn.kv_a_proj_with_mqa", h, kv_down, s.qkv_bias);
  add(layer.params, prefix + ".attn.kv_a_layernorm.weight", {a.kv_lora_rank});
  add_linear(layer.params, prefix + ".attn.kv_b_proj", a.kv_lora_rank, kv_up, false);
  add_linear(layer.params, prefix + ".attn.o_proj", out, h, s.out_proj_bias);
  part.inside +=
      double(kv_down) + double(a.kv_lora_rank) + double(kv_up) + 2 * double(q) + double(out);
  part.matmul_weights += double(h) * double(kv_down) + double(a.kv_lora_rank) * double(kv_up) +
                         double(out) * double(h);
  part.attention_flops_per_position = 2 * double(heads) * double(a.qk_head_dim() + a.v_head_dim);
  return part;
}

// GPT-2's MLP of width f (DeepSpeed's GPT-2 MoE examples use it as the expert): fc_in [f, h],
// GELU, fc_out [h, f], with biases when the shape has them.
void add_gelu_mlp(std::vector<TensorSpec>& params, const std::string& prefix, std::int64_t h,
                  std::int64_t f, bool bias, bool expert = false) {
  add_linear(params, prefix + ".fc_in", h, f, bias, expert);
  add_linear(params, prefix + ".fc_out", f, h, bias, expert);
}

// The block's MLP kind (shape.mlp): an expert is a copy of it (DeepSpeed's MoE(expert=...)
// deep-copies the module it is given: deepspeed/moe/experts.py Experts).
void add_mlp(std::vector<TensorSpec>& params, const TransformerShape& s, const std::string& prefix,
             std::int64_t f, bool expert = false) {
  if (s.mlp == MlpKind::Gelu) {
    add_gelu_mlp(params, prefix, s.hidden, f, s.mlp_bias, expert);
  } else {
    add_swiglu(params, prefix, s.hidden, f, expert);
  }
}

// Per row (token) of an MLP of width f: the elements kept for backward (SwiGLU: gate output, SiLU
// output, up output, down input, 4f; GELU: its input and output, 2f), the widest intermediate
// gradients in backward (2f; f) and the matrix-product weights (3hf; 2hf).
double mlp_kept(MlpKind kind, double f) {
  return kind == MlpKind::Gelu ? 2 * f : 4 * f;
}
double mlp_backward_working(MlpKind kind, double f) {
  return kind == MlpKind::Gelu ? f : 2 * f;
}
double mlp_weights(MlpKind kind, double h, double f) {
  return (kind == MlpKind::Gelu ? 2 : 3) * h * f;
}

// A dense MLP of width f with its kept activations and backward working set.
Part dense_mlp(const TransformerShape& s, std::int64_t f, const std::string& prefix, Layer& layer) {
  add_mlp(layer.params, s, prefix, f);
  return Part{.inside = mlp_kept(s.mlp, double(f)),
              .backward_working = mlp_backward_working(s.mlp, double(f)),
              .matmul_weights = mlp_weights(s.mlp, double(s.hidden), double(f))};
}

// The routing of one MoE layer as `ep` runs it, with what each row its experts compute keeps.
// Dropless (Hugging Face's blocks): a row is a token's gathered input h, the expert's 4f, its
// output h (kept by the product with its routing weight) and that weight. DeepSpeed's MOELayer:
// a row of the received dispatch buffer (h, kept by the expert's first projections) and the
// expert's 4f; in forward the combine's received buffer and its padded copy (_sparse_decode's
// torch.cat) are alive together.
MoeRouting routing(const MoeShape& m, MlpKind kind, std::int64_t h, const ExpertParallelism& ep) {
  const double f = double(m.expert_ffn), hidden = double(h);
  MoeRouting r{.experts = m.experts,
               .local_experts = m.experts / std::max(1, ep.size),
               .top_k = m.top_k,
               .expert_parallel = std::max(1, ep.size),
               .capacity_factor = ep.capacity_factor,
               .min_capacity = ep.min_capacity,
               .hidden = h};
  const double kept = mlp_kept(kind, f);
  r.row_elements = r.exchanges() ? hidden + kept : 2 * hidden + kept + 1;
  r.row_forward_working_elements = r.exchanges() ? 2 * hidden : 0;
  // The gradients of a row's input and output, and of its widest intermediates.
  r.row_backward_working_elements = 2 * hidden + mlp_backward_working(kind, f);
  // DeepSpeed: _sparse_decode's routed rows (k h per token, saved by their product with the
  // gates) go when that product's backward ran, before _AllToAll.backward and the experts'.
  // Dropless, Hugging Face's loop keeps each expert's output until that expert's turn in backward.
  r.token_released_elements = r.exchanges() ? double(m.top_k) * hidden : 0;
  r.row_flops = 2 * mlp_weights(kind, hidden, f);
  return r;
}

// The MoE MLP: router, routed experts (this rank's), shared experts. Per token it keeps the
// router's state: dropless, the fp32 softmax (4E bytes), the top-k indices (8k) and the
// normalised fp32 weights (4k), and builds a one-hot int64 expert mask [E, k, tokens] in forward;
// DeepSpeed's TopKGate, the fp32 copy of its input (4h, kept by the fp32 linear), the fp32 gates
// (4E), the bool mask (E), the masked gates and their sum (4E + 4), the top-k indices (8k) and the
// routes' fp32 gates (4k), and the combine's routed rows (k h) kept by their product with the
// gates, which is fp32 in forward (4 k h bytes).
Part moe_mlp(const TransformerShape& s, const std::string& prefix, Layer& layer,
             const ExpertParallelism& ep) {
  const MoeShape& m = *s.moe;
  const std::int64_t h = s.hidden;
  const double E = double(m.experts), k = double(m.top_k), hidden = double(h);
  add_linear(layer.params, prefix + ".mlp.gate", h, m.experts, false);
  if (m.router_bias) add(layer.params, prefix + ".mlp.gate.e_score_correction_bias", {m.experts});
  layer.moe = routing(m, s.mlp, h, ep);
  for (int e = 0; e < layer.moe->local_experts; ++e)
    add_mlp(layer.params, s, prefix + ".mlp.experts." + std::to_string(e), m.expert_ffn, true);
  Part part;
  part.matmul_weights = hidden * E;
  if (layer.moe->exchanges()) {
    part.inside = k * hidden;
    part.fixed_bytes = 4 * hidden + 9 * E + 4 + 12 * k;
    part.forward_working_fixed = 4 * k * hidden;
  } else {
    part.fixed_bytes = 4 * E + 12 * k;
    part.forward_working_fixed = 8 * E * k;
  }
  if (m.shared_ffn > 0) {
    const Part shared = dense_mlp(s, m.shared_ffn, prefix + ".mlp.shared_experts", layer);
    part.inside += shared.inside;
    part.backward_working += shared.backward_working;
    part.matmul_weights += shared.matmul_weights;
  }
  if (m.shared_expert_gate) {
    // sigmoid(shared_expert_gate(x)) x shared_expert(x): the gate's output and the shared output.
    add_linear(layer.params, prefix + ".mlp.shared_expert_gate", h, 1, false);
    part.inside += 1 + hidden;
    part.matmul_weights += hidden;
  }
  return part;
}

// The shape's norm: RMSNorm's weight, or LayerNorm's weight and bias (GPT-2).
void add_norm(Layer& layer, const TransformerShape& s, const std::string& name) {
  add(layer.params, name + ".weight", {s.hidden});
  if (s.norm == NormKind::LayerNorm) add(layer.params, name + ".bias", {s.hidden});
}

}  // namespace

Layer mixture_block_layer(const TransformerShape& s, int index, const ExpertParallelism& ep) {
  const std::string prefix = "h." + std::to_string(index);
  Layer layer{.name = prefix, .kind = LayerKind::TransformerBlock};
  const std::int64_t h = s.hidden;
  add_norm(layer, s, prefix + ".ln_1");
  const Part attention =
      s.mla ? latent_attention(s, prefix, layer) : standard_attention(s, prefix, layer);
  add_norm(layer, s, prefix + ".ln_2");
  const Part mlp = s.moe && s.moe->is_moe_layer(index)
                       ? moe_mlp(s, prefix, layer, ep)
                       : dense_mlp(s, s.ffn_hidden, prefix + ".mlp", layer);
  const double hidden = double(h), a = double(s.heads);
  const bool dropout = s.dropout > 0;
  ActivationTerms& t = layer.activations;
  // The residual stream's four inputs of h (both norms', the attention's and the MLP's), as in
  // model.cpp's block_activations, then each part's own.
  t.elements = 4 * hidden + attention.inside + mlp.inside;
  t.fixed_bytes = attention.fixed_bytes + mlp.fixed_bytes;
  if (dropout) t.mask_bytes = 2 * hidden;
  if (s.attention == AttentionImpl::Eager) {
    t.elements_per_position = dropout ? 2 * a : a;
    t.mask_bytes_per_position = dropout ? a : 0;
    t.backward_working_elements_per_position = a;
  } else {
    t.fixed_bytes += 4 * a;  // fp32 log-sum-exp per head and token
  }
  t.checkpoint_elements = hidden;
  t.forward_working_fixed_bytes = mlp.forward_working_fixed;
  t.backward_working_elements = 2 * hidden + mlp.backward_working;
  layer.matmul_flops_per_token = 2 * (attention.matmul_weights + mlp.matmul_weights);
  layer.attention_flops_per_token_position = attention.attention_flops_per_position;
  return layer;
}

}  // namespace zerolens
