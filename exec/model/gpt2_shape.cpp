// GPT-2's shared pieces: the architecture check, initial weights and the synthetic corpus.
#include "exec/model/gpt2_shape.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "sim/core/error.hpp"

namespace zerolens::exec {
namespace {

std::uint64_t mix(std::uint64_t key) {  // splitmix64
  std::uint64_t z = key + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double uniform01(std::uint64_t key) { return (double(mix(key) >> 11) + 0.5) / double(1ULL << 53); }

// Box-Muller on two independent uniforms.
double normal(std::uint64_t key) {
  const double u1 = uniform01(key), u2 = uniform01(key ^ 0x5bd1e9955bd1e995ULL);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

std::vector<std::int32_t> permutation_of(std::uint64_t seed, std::int64_t vocab) {
  std::vector<std::int32_t> order(static_cast<std::size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  for (std::size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[mix(seed * 31 + i) % i]);
  }
  return order;
}

void fill_sequence(std::uint64_t seed, const std::vector<std::int32_t>& permutation, std::int64_t sample,
                   std::span<std::int32_t> out) {
  const std::uint64_t vocab = permutation.size();
  const std::uint64_t base = mix(seed ^ (std::uint64_t(sample) * 0x9e3779b97f4a7c15ULL));
  std::int32_t token = std::int32_t(mix(base) % vocab);
  for (std::size_t t = 0; t < out.size(); ++t) {
    out[t] = token;
    const std::uint64_t roll = mix(base + 2 * t + 1);
    token = roll % 8 == 0 ? std::int32_t(mix(base + 2 * t + 2) % vocab) : permutation[std::size_t(token)];
  }
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const char* const kBlockSuffixes[kBlockParams] = {
    "ln_1.weight", "ln_1.bias", "attn.q_proj.weight", "attn.q_proj.bias", "attn.k_proj.weight",
    "attn.k_proj.bias", "attn.v_proj.weight", "attn.v_proj.bias", "attn.o_proj.weight", "attn.o_proj.bias",
    "ln_2.weight", "ln_2.bias", "mlp.fc_in.weight", "mlp.fc_in.bias", "mlp.fc_out.weight", "mlp.fc_out.bias"};

void require(bool condition, const std::string& where, const std::string& why) {
  if (!condition) throw InputError(where, why);
}

// The executor implements GPT-2 exactly; anything else in the description is refused by name.
void check_shape(const Model& model, const Gpt2Options& options) {
  require(model.shape.has_value(), "--model", "the executor trains GPT-2 transformers; '" + model.name +
                                                   "' is a " + model.source + " model without a transformer shape");
  const TransformerShape& s = *model.shape;
  const std::string why = " (the executor trains the GPT-2 architecture)";
  require(s.norm == NormKind::LayerNorm, "model.norm", "RMSNorm is not supported" + why);
  require(s.mlp == MlpKind::Gelu, "model.mlp", "SwiGLU is not supported" + why);
  require(s.kv_heads == s.heads, "model.kv_heads", "grouped-query attention is not supported" + why);
  require(s.effective_head_dim() * s.heads == s.hidden, "model.head_dim", "heads x head_dim must equal hidden" + why);
  require(s.attention == AttentionImpl::Eager, "model.attention", "flash attention is not implemented; use eager");
  require(!s.qk_norm && !s.sandwich_norms, "model",
          "query/key and sandwich norms are not supported" + why);
  require(s.learned_positions && s.tied_embeddings && s.qkv_bias && s.out_proj_bias && s.mlp_bias,
          "model", "needs learned positions, a tied LM head and biases" + why);
  require(s.dropout == 0, "model.dropout", "the executor trains without dropout; plan with dropout 0");
  require(s.extra_params == 0, "model", "dense:N models are not GPT-2 checkpoints" + why);
  require(options.seq_len >= 1 && options.seq_len <= s.max_positions, "--seq-len",
          std::to_string(options.seq_len) + " is outside 1.." + std::to_string(s.max_positions) + " (the position table)");
  require(options.micro_batch >= 1, "--micro-batch", "must be at least 1");
  require(!s.mla, "model.mla", "latent attention is not supported" + why);
  if (!s.moe) return;
  // DeepSpeed's MoE around GPT-2's MLP: a router without bias and routed experts only.
  const MoeShape& m = *s.moe;
  require(m.shared_ffn == 0 && !m.shared_expert_gate, "model.moe.shared_ffn",
          "shared experts are not supported (the executor runs DeepSpeed's MoE of routed GPT-2 "
          "MLP experts)");
  require(!m.router_bias, "model.moe.router_bias",
          "a router bias is not supported (DeepSpeed's TopKGate.wg has none)");
  require(!model.pipeline.active(), "--pp",
          "pipeline parallelism of a mixture-of-experts GPT-2 is not run by the executor");
  const ExpertParallelism& ep = model.expert_parallel;
  require(options.expert_parallel_rank >= 0 && options.expert_parallel_rank < ep.size, "--ep",
          "rank " + std::to_string(options.expert_parallel_rank) +
              " is outside the expert-parallel group of " + std::to_string(ep.size));
}

void check_param(const Layer& layer, std::size_t i, std::size_t p, const std::string& suffix) {
  require(
      ends_with(layer.params[p].name, suffix), "model.layers[" + std::to_string(i) + "]",
      "parameter " + std::to_string(p) + " is '" + layer.params[p].name + "', expected *" + suffix);
}

void check_block_params(const Layer& layer, std::size_t i) {
  for (std::size_t p = 0; p < kBlockParams; ++p) check_param(layer, i, p, kBlockSuffixes[p]);
}

// A MoE block: the block's tensors up to ln_2, the router, each local expert's four.
void check_moe_block_params(const Layer& layer, std::size_t i, std::size_t local_experts) {
  for (std::size_t p = 0; p < kMoeRouter; ++p) check_param(layer, i, p, kBlockSuffixes[p]);
  check_param(layer, i, kMoeRouter, "mlp.gate.weight");
  const char* const expert[] = {"fc_in.weight", "fc_in.bias", "fc_out.weight", "fc_out.bias"};
  for (std::size_t e = 0; e < local_experts; ++e) {
    for (std::size_t t = 0; t < 4; ++t) {
      check_param(layer, i, kMoeRouter + 1 + 4 * e + t,
                  "mlp.experts." + std::to_string(e) + "." + expert[t]);
    }
  }
}

// GPT-2's layers where it has them: the embedding first, the blocks, the final norm and the LM
// head last (tied to the embedding, or a pipeline stage's copy of it); a pipeline stage holds a
// run of them (sim's pipeline_stage_model).
std::vector<Gpt2Role> roles_of(const Model& model) {
  std::vector<Gpt2Role> roles;
  const std::size_t count = model.layers.size();
  for (std::size_t i = 0; i < count; ++i) {
    const Layer& layer = model.layers[i];
    const bool tied_head =
        layer.shares_params_of == 0 ||
        (layer.shares_params_of < 0 && layer.params.size() == 1 && model.tied_embedding_end);
    Gpt2Role role = Gpt2Role::Block;
    if (layer.kind == LayerKind::Embedding && i == 0 && layer.params.size() == 2) role = Gpt2Role::Embedding;
    else if (layer.kind == LayerKind::FinalNorm && i + 2 == count) role = Gpt2Role::FinalNorm;
    else if (layer.kind == LayerKind::LmHead && i + 1 == count && tied_head)
      role = Gpt2Role::Head;
    else if (layer.moe)
      role = Gpt2Role::MoeBlock;
    else
      require(layer.kind == LayerKind::TransformerBlock && layer.params.size() == kBlockParams,
              "model.layers[" + std::to_string(i) + "]",
              "'" + layer.name + "' is not where GPT-2 has it");
    if (role == Gpt2Role::Block) check_block_params(layer, i);
    if (role == Gpt2Role::MoeBlock) {
      const auto local = std::size_t(layer.moe->local_experts);
      require(layer.kind == LayerKind::TransformerBlock &&
                  layer.params.size() == kMoeBlockParams(local),
              "model.layers[" + std::to_string(i) + "]",
              "'" + layer.name + "' is not a GPT-2 block with a MoE MLP");
      check_moe_block_params(layer, i, local);
    }
    roles.push_back(role);
  }
  const bool whole = !model.pipeline.active();
  require(
      !whole ||
          (count >= 3 && roles.front() == Gpt2Role::Embedding && roles.back() == Gpt2Role::Head),
      "model.layers", "GPT-2 starts with its embedding and ends with its final norm and LM head");
  return roles;
}

const TensorSpec* find_tensor(const Model& model, std::int32_t tensor) {
  std::int32_t id = 0;
  for (const Layer& layer : model.layers) {
    if (layer.shares_params_of >= 0) continue;
    for (const TensorSpec& t : layer.params) {
      if (id++ == tensor) return &t;
    }
  }
  throw std::out_of_range("GPT-2 init_tensor: no tensor " + std::to_string(tensor));
}

// A pipeline stage's tensor `tensor` as the whole model numbers it (its initial values are the
// whole model's): found by name in the model its shape builds, a tied head's copy by the name of
// what it copies ("lm_head.weight (copy of wte.weight)").
// An expert parallel share's routed expert "h.1.mlp.experts.<local>.fc_in.weight" is the whole
// model's "h.1.mlp.experts.<global>.fc_in.weight", global = EP rank x local experts + local.
std::string global_expert_name(const Model& model, const std::string& name, int ep_rank) {
  const std::string marker = ".mlp.experts.";
  const auto at = name.find(marker);
  if (!model.expert_parallel.active() || at == std::string::npos) return name;
  const auto first = at + marker.size(), end = name.find('.', first);
  const int local = std::stoi(name.substr(first, end - first));
  const int per_rank = model.shape->moe->experts / model.expert_parallel.size;
  return name.substr(0, first) + std::to_string(ep_rank * per_rank + local) + name.substr(end);
}

// A pipeline stage's or an expert-parallel share's tensor `tensor` as the whole model numbers it
// (its initial values are the whole model's): found by name in the model its shape builds, a tied
// head's copy by the name of what it copies ("lm_head.weight (copy of wte.weight)"), an expert by
// its global index.
std::int32_t whole_model_tensor(const Model& model, std::int32_t tensor, const TensorSpec& spec,
                                int ep_rank) {
  if (!model.pipeline.active() && !model.expert_parallel.active()) return tensor;
  std::string name = global_expert_name(model, spec.name, ep_rank);
  const std::string copy = " (copy of ";
  if (const auto at = name.find(copy); at != std::string::npos)
    name = name.substr(at + copy.size(), name.size() - at - copy.size() - 1);
  const Model whole = build_transformer(model.name, *model.shape, model.tensor_parallel);
  std::int32_t id = 0;
  for (const Layer& layer : whole.layers) {
    if (layer.shares_params_of >= 0) continue;
    for (const TensorSpec& t : layer.params) {
      if (t.name == name) return id;
      ++id;
    }
  }
  throw std::out_of_range("GPT-2 init_tensor: no tensor '" + name + "' in the whole model");
}

// Under TP each rank holds heads / t heads and the rows of its vocabulary part; under SP the
// micro-batch's tokens split into t equal runs (Megatron requires the sequence to split so).
void check_tensor_parallel(const Model& model, const Gpt2Options& options) {
  const TensorParallelism& tp = model.tensor_parallel;
  require(options.tensor_parallel_rank >= 0 && options.tensor_parallel_rank < tp.size, "--tp",
          "rank " + std::to_string(options.tensor_parallel_rank) +
              " is outside the tensor-parallel group of " + std::to_string(tp.size));
  if (!tp.active() || !tp.sequence_parallel) return;
  require(options.seq_len % tp.size == 0, "--seq-len",
          "sequence parallelism splits the sequence over the " + std::to_string(tp.size) +
              " ranks of the TP group: " + std::to_string(options.seq_len) +
              " is not a multiple of it");
}

// The token embedding's rows on this rank: the table's first dimension (the tied head's copy
// when the embedding is elsewhere).
std::size_t shard_vocabulary(const Model& model) {
  for (const Layer& layer : model.layers) {
    if ((layer.kind == LayerKind::Embedding || layer.kind == LayerKind::LmHead) &&
        !layer.params.empty())
      return std::size_t(layer.params.front().shape.front());
  }
  return std::size_t(model.shape->vocab);
}

}  // namespace

Gpt2Layout gpt2_layout(const Model& model, const Gpt2Options& options) {
  check_shape(model, options);
  check_tensor_parallel(model, options);
  Gpt2Layout layout;
  layout.roles = roles_of(model);
  const TransformerShape& s = *model.shape;
  const TensorParallelism& tp = model.tensor_parallel;
  const std::size_t shard_vocab = shard_vocabulary(model);
  const MoeShape moe = s.moe.value_or(MoeShape{});
  layout.dims = {.batch = std::size_t(options.micro_batch),
                 .seq_len = std::size_t(options.seq_len),
                 .channels = std::size_t(s.hidden),
                 .heads = std::size_t(s.heads),
                 .ffn = std::size_t(s.ffn_hidden),
                 .vocab = std::size_t(s.vocab),
                 .blocks = std::size_t(s.layers),
                 .tp = std::size_t(tp.size),
                 .tp_rank = std::size_t(options.tensor_parallel_rank),
                 .sp = tp.active() && tp.sequence_parallel,
                 .shard_vocab = shard_vocab,
                 .vocab_first = std::size_t(options.tensor_parallel_rank) * shard_vocab,
                 .experts = std::size_t(moe.experts),
                 .top_k = std::size_t(moe.top_k),
                 .expert_ffn = std::size_t(moe.expert_ffn),
                 .ep = std::size_t(model.expert_parallel.size),
                 .ep_rank = std::size_t(options.expert_parallel_rank),
                 .capacity_factor = model.expert_parallel.capacity_factor,
                 .min_capacity = model.expert_parallel.min_capacity};
  return layout;
}

void refuse_mixture_of_experts(const Model& model, const std::string& model_name) {
  if (model.shape && model.shape->moe) {
    throw InputError("--model", model_name + " does not run mixture-of-experts blocks ('" +
                                    model.name + "'); train it on the CPU backend (Gpt2Model)");
  }
}

std::int64_t whole_element(const TensorSpec& spec, int size, int rank, std::int64_t index) {
  switch (spec.split) {
    case TensorSplit::Replicated:
      return index;
    case TensorSplit::Column:
    case TensorSplit::Vocab:
      return std::int64_t(rank) * spec.numel() + index;
    case TensorSplit::Row: {
      const std::int64_t width = spec.shape.back();  // this rank's columns of each row
      return index / width * width * size + std::int64_t(rank) * width + index % width;
    }
  }
  return index;
}

// GPT-2's initialisation: N(0, 0.02) weights, residual projections scaled by 1/sqrt(2 L), N(0, 0.01)
// positions, zero biases, unit norm gains.
void gpt2_init_tensor(const Model& model, std::uint64_t seed, std::int32_t tensor,
                      std::span<float> values, int tensor_parallel_rank, int expert_parallel_rank) {
  const TensorSpec& spec = *find_tensor(model, tensor);
  const bool norm = spec.name.find("ln_") != std::string::npos;
  double std_dev = 0.02;
  if (ends_with(spec.name, ".bias")) std_dev = 0;
  if (ends_with(spec.name, "o_proj.weight") || ends_with(spec.name, "fc_out.weight"))
    std_dev = 0.02 / std::sqrt(2.0 * double(model.shape->layers));
  if (ends_with(spec.name, "wpe.weight")) std_dev = 0.01;
  const std::uint64_t key =
      mix(seed ^
          (std::uint64_t(whole_model_tensor(model, tensor, spec, expert_parallel_rank) + 1) << 40));
  const int tp = model.tensor_parallel.size;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto whole =
        std::uint64_t(whole_element(spec, tp, tensor_parallel_rank, std::int64_t(i)));
    if (norm) values[i] = ends_with(spec.name, ".weight") ? 1.0f : 0.0f;
    else
      values[i] = std_dev == 0 ? 0.0f : float(std_dev * normal(key + whole));
  }
}

Gpt2Corpus::Gpt2Corpus(std::uint64_t seed, std::int64_t vocab) : seed_(seed), permutation_(permutation_of(seed, vocab)) {}

void Gpt2Corpus::fill_batch(std::int64_t first_sample, std::size_t batch, std::size_t seq_len,
                            std::span<std::int32_t> tokens, std::span<std::int32_t> targets) const {
  if (tokens.size() != batch * seq_len || targets.size() != batch * seq_len) {
    throw std::logic_error("Gpt2Corpus::fill_batch: buffers are not [batch, seq_len]");
  }
  std::vector<std::int32_t> sequence(seq_len + 1);
  for (std::size_t b = 0; b < batch; ++b) {
    fill_sequence(seed_, permutation_, first_sample + std::int64_t(b), sequence);
    std::copy(sequence.begin(), sequence.end() - 1, tokens.begin() + std::ptrdiff_t(b * seq_len));
    std::copy(sequence.begin() + 1, sequence.end(), targets.begin() + std::ptrdiff_t(b * seq_len));
  }
}

std::vector<std::int32_t> synthetic_sequence(std::uint64_t seed, std::int64_t vocab, std::int64_t sample,
                                             std::int64_t length) {
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(length));
  fill_sequence(seed, permutation_of(seed, vocab), sample, tokens);
  return tokens;
}

}  // namespace zerolens::exec
