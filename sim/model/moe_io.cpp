#include "sim/model/moe_io.hpp"

#include <nlohmann/json.hpp>

#include "sim/core/json_read.hpp"

namespace zerolens {
namespace {

using nlohmann::json;
using namespace json_read;

std::int64_t required(const json& c, const std::string& key, const std::string& where,
                      std::int64_t low, std::int64_t high) {
  const json* value = member(c, key);
  if (!value) throw InputError(join_key(where, key), "missing (required for this model type)");
  return as_int(*value, join_key(where, key), low, high);
}

// A key that is absent or null reads as `fallback` (DeepSeek writes "q_lora_rank": null).
std::int64_t optional(const json& c, const std::string& key, const std::string& where,
                      std::int64_t low, std::int64_t high, std::int64_t fallback) {
  const json* value = member(c, key);
  return value ? as_int(*value, join_key(where, key), low, high) : fallback;
}

constexpr std::int64_t kMaxWidth = 1 << 24, kMaxExperts = 1 << 16;

// The routed experts' count and width under each family's key names.
MoeShape routed_experts(const json& c, const std::string& where, const std::string& type) {
  MoeShape m;
  const bool mixtral = type == "mixtral", deepseek = type.rfind("deepseek", 0) == 0;
  const char* count_key = mixtral    ? "num_local_experts"
                          : deepseek ? "n_routed_experts"
                                     : "num_experts";
  m.experts = int(required(c, count_key, where, 1, kMaxExperts));
  // (TransformerShape::validate holds experts x layers to 2^17; named here by the config's key.)
  const json* layers = member(c, "num_hidden_layers");
  if (layers && layers->is_number_integer() && layers->get<std::int64_t>() > 0 &&
      layers->get<std::int64_t>() > (1 << 17) / m.experts) {
    throw InputError(join_key(where, count_key),
                     "x num_hidden_layers must be at most 2^17 (the model's expert tensors)");
  }
  m.top_k = int(required(c, "num_experts_per_tok", where, 1, m.experts));
  // Mixtral's experts are intermediate_size wide (MixtralBlockSparseTop2MLP); the others' are
  // moe_intermediate_size, their dense layers intermediate_size.
  m.expert_ffn =
      required(c, mixtral ? "intermediate_size" : "moe_intermediate_size", where, 1, kMaxWidth);
  return m;
}

// Qwen2-MoE's and Qwen3-MoE's decoder layers (modeling_qwen2_moe.py, modeling_qwen3_moe.py): MoE
// unless listed in mlp_only_layers, where (layer + 1) % decoder_sparse_step == 0; Qwen2-MoE adds
// one shared expert with a sigmoid gate.
void read_qwen(const json& c, const std::string& where, const std::string& type, int layers,
               MoeShape& m) {
  m.sparse_step = int(optional(c, "decoder_sparse_step", where, 1, layers, 1));
  if (const json* only = member(c, "mlp_only_layers")) {
    const std::string key = join_key(where, "mlp_only_layers");
    if (!only->is_array()) throw InputError(key, "must be an array of layer indices");
    for (std::size_t i = 0; i < only->size(); ++i) {
      m.dense_layers.push_back(
          int(as_int((*only)[i], key + "[" + std::to_string(i) + "]", 0, layers - 1)));
    }
  }
  if (type == "qwen2_moe") {
    m.shared_ffn = required(c, "shared_expert_intermediate_size", where, 1, kMaxWidth);
    m.shared_expert_gate = true;
  }
}

// DeepSeek-V2/V3 (modeling_deepseek_v2.py, modeling_deepseek_v3.py): the first
// first_k_dense_replace layers dense, then MoE layers with n_shared_experts x moe_intermediate_size
// of shared experts; V3's noaux_tc router keeps an e_score_correction_bias per expert (a
// parameter in DeepSeek's modeling_deepseek.py and the checkpoint). Attention is MLA.
void read_deepseek(const json& c, const std::string& where, int layers, TransformerShape& s,
                   Diagnostics& diagnostics) {
  MoeShape& m = *s.moe;
  m.first_dense_layers = int(optional(c, "first_k_dense_replace", where, 0, layers, 0));
  const std::int64_t shared = optional(c, "n_shared_experts", where, 0, 1024, 0);
  m.shared_ffn = shared * m.expert_ffn;
  const std::int64_t frequency = optional(c, "moe_layer_freq", where, 1, layers, 1);
  if (frequency != 1) {
    throw InputError(join_key(where, "moe_layer_freq"),
                     "only 1 (every layer after first_k_dense_replace is MoE) is modelled");
  }
  if (const json* method = member(c, "topk_method")) {
    m.router_bias = as_string(*method, join_key(where, "topk_method")) == "noaux_tc";
  }
  MlaShape a;
  a.q_lora_rank = optional(c, "q_lora_rank", where, 1, 1 << 20, 0);
  a.kv_lora_rank = required(c, "kv_lora_rank", where, 1, 1 << 20);
  a.qk_rope_head_dim = required(c, "qk_rope_head_dim", where, 0, 1 << 16);
  a.qk_nope_head_dim = required(c, "qk_nope_head_dim", where, 0, 1 << 16);
  a.v_head_dim = required(c, "v_head_dim", where, 1, 1 << 16);
  s.mla = a;
  if (optional(c, "num_nextn_predict_layers", where, 0, 1024, 0) > 0) {
    diagnostics.warn(join_key(where, "num_nextn_predict_layers"),
                     "the multi-token-prediction module is not built (Hugging Face's "
                     "DeepseekV3ForCausalLM does not build it either): its parameters are not "
                     "counted");
  }
}

}  // namespace

std::string mixture_base_family(const std::string& model_type) {
  if (model_type == "mixtral") return "mistral";
  if (model_type == "qwen2_moe") return "qwen2";
  if (model_type == "qwen3_moe") return "qwen3";
  if (model_type == "deepseek_v2" || model_type == "deepseek_v3") return "llama";
  return "";
}

void read_mixture(const json& c, const std::string& where, const std::string& type,
                  TransformerShape& s, Diagnostics& diagnostics) {
  s.family = type;
  // DeepSeek writes n_routed_experts null for a dense model: its layers are then all dense.
  const bool deepseek = type.rfind("deepseek", 0) == 0;
  if (!(deepseek && !member(c, "n_routed_experts"))) s.moe = routed_experts(c, where, type);
  if (s.moe && type.rfind("qwen", 0) == 0) read_qwen(c, where, type, s.layers, *s.moe);
  if (deepseek) {
    if (!s.moe) s.moe = MoeShape{};
    read_deepseek(c, where, s.layers, s, diagnostics);
    if (s.moe->experts == 0) s.moe.reset();
  }
}

}  // namespace zerolens
