// LoRA and QLoRA on a transformer's blocks (docs/model-format.md, "LoRA and QLoRA";
// docs/memory-model.md, "Frozen parameters").
#include "sim/model/lora.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "sim/core/error.hpp"

namespace zerolens {
namespace {

// One adapter pair on a block: the module it is named after (a path under the block, as in the
// tensor names) and the block's linears it adapts as one (a fused module adapts several: GPT-2's
// c_attn is q, k and v; one A over their common input, one B over their outputs stacked).
struct Adapter {
  std::string path;
  std::vector<std::string> linears;
};
struct Module {
  std::string name;  // as PEFT's target_modules names it
  std::vector<Adapter> adapters;
};

// The modules of a shape's blocks, by the names of the family's Hugging Face modeling file.
// BERT and RoBERTa (modeling_bert.py): query, key, value, attention.output.dense,
// intermediate.dense, output.dense; PEFT matches a name's suffix, so output.dense names both output
// projections and dense all three (the MLM head's transform dense is not adapted here).
std::vector<Module> bert_modules() {
  const Adapter o{"attn.output.dense", {"attn.o_proj"}},
      up{"mlp.intermediate.dense", {"mlp.fc_in"}}, down{"mlp.output.dense", {"mlp.fc_out"}};
  return {{"query", {{"attn.query", {"attn.q_proj"}}}},
          {"key", {{"attn.key", {"attn.k_proj"}}}},
          {"value", {{"attn.value", {"attn.v_proj"}}}},
          {"attention.output.dense", {o}},
          {"intermediate.dense", {up}},
          {"output.dense", {o, down}},
          {"dense", {o, up, down}}};
}

// T5 and mT5 (modeling_t5.py): q, k, v, o in the self-attention and, in decoder blocks, the
// cross-attention (both match the name), wi and wo (wi_0, wi_1 and wo when gated).
std::vector<Module> t5_modules(const TransformerShape& s) {
  std::vector<Module> modules;
  for (const char* name : {"q", "k", "v", "o"}) {
    const std::string linear = std::string(name) + "_proj";
    modules.push_back({name,
                       {{std::string("attn.") + name, {"attn." + linear}},
                        {std::string("cross.") + name, {"cross." + linear}}}});
  }
  if (s.mlp == MlpKind::Gelu) {
    modules.push_back({"wi", {{"mlp.wi", {"mlp.fc_in"}}}});
    modules.push_back({"wo", {{"mlp.wo", {"mlp.fc_out"}}}});
  } else {
    modules.push_back({"wi_0", {{"mlp.wi_0", {"mlp.gate_proj"}}}});
    modules.push_back({"wi_1", {{"mlp.wi_1", {"mlp.up_proj"}}}});
    modules.push_back({"wo", {{"mlp.wo", {"mlp.down_proj"}}}});
  }
  return modules;
}

std::vector<Module> modules_of(const TransformerShape& s) {
  if (s.architecture == Architecture::Encoder) return bert_modules();
  if (s.architecture == Architecture::EncoderDecoder) return t5_modules(s);
  if (s.mlp == MlpKind::Gelu) {  // GPT-2 (and GPT-style dense:N): Conv1D c_attn, c_proj, c_fc
    const Adapter attn_out{"attn.c_proj", {"attn.o_proj"}}, mlp_out{"mlp.c_proj", {"mlp.fc_out"}};
    return {{"c_attn", {{"attn.c_attn", {"attn.q_proj", "attn.k_proj", "attn.v_proj"}}}},
            {"c_proj", {attn_out, mlp_out}},  // PEFT matches the name's suffix: both c_proj
            {"attn.c_proj", {attn_out}},
            {"mlp.c_proj", {mlp_out}},
            {"c_fc", {{"mlp.c_fc", {"mlp.fc_in"}}}}};
  }
  const auto single = [](const char* name, const char* path) {
    return Module{name, {{path, {path}}}};
  };
  if (s.family == "phi3") {  // modeling_phi3.py fuses q, k, v and gate, up
    return {{"qkv_proj", {{"attn.qkv_proj", {"attn.q_proj", "attn.k_proj", "attn.v_proj"}}}},
            single("o_proj", "attn.o_proj"),
            {"gate_up_proj", {{"mlp.gate_up_proj", {"mlp.gate_proj", "mlp.up_proj"}}}},
            single("down_proj", "mlp.down_proj")};
  }
  return {single("q_proj", "attn.q_proj"),      single("k_proj", "attn.k_proj"),
          single("v_proj", "attn.v_proj"),      single("o_proj", "attn.o_proj"),
          single("gate_proj", "mlp.gate_proj"), single("up_proj", "mlp.up_proj"),
          single("down_proj", "mlp.down_proj")};
}

constexpr const char* kAllLinear = "all-linear";

// The adapters the targets ask for, each once ("all-linear": every linear of the block, as PEFT
// takes every nn.Linear but the output layer).
std::vector<Adapter> adapters_of(const TransformerShape& s) {
  const std::vector<Module> modules = modules_of(s);
  const std::vector<std::string> targets =
      s.lora.targets.empty() ? default_lora_targets(s) : s.lora.targets;
  std::vector<Adapter> adapters;
  const auto add = [&](const Adapter& adapter) {
    const bool known = std::any_of(adapters.begin(), adapters.end(),
                                   [&](const Adapter& a) { return a.path == adapter.path; });
    if (!known) adapters.push_back(adapter);
  };
  for (const Module& module : modules) {
    const bool all = std::find(targets.begin(), targets.end(), kAllLinear) != targets.end();
    if (all || std::find(targets.begin(), targets.end(), module.name) != targets.end()) {
      for (const Adapter& adapter : module.adapters) add(adapter);
    }
  }
  return adapters;
}

// The block's linears (what a 4-bit base quantizes: bitsandbytes replaces every nn.Linear but the
// LM head, transformers' get_keys_to_not_convert).
std::vector<std::string> block_linears(const TransformerShape& s) {
  std::vector<std::string> linears = {"attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.o_proj"};
  if (s.architecture == Architecture::EncoderDecoder)
    linears.insert(linears.end(), {"cross.q_proj", "cross.k_proj", "cross.v_proj", "cross.o_proj"});
  if (s.mlp == MlpKind::Gelu) {
    linears.insert(linears.end(), {"mlp.fc_in", "mlp.fc_out"});
  } else {
    linears.insert(linears.end(), {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"});
  }
  return linears;
}

TensorSpec* tensor_named(Layer& layer, const std::string& name) {
  for (TensorSpec& tensor : layer.params) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;  // an encoder block has no cross-attention
}

// A block's adapters, its base in the base format, and what the frozen base changes in its
// activations: a linear keeps its input for backward only to compute its weight's gradient
// (PyTorch's generated autograd saves mm's `self` only when should_compute_output of the weight:
// tools/autograd/gen_variable_type.py; bitsandbytes' MatMul4Bit saves no input either), so a frozen
// linear's input is kept only when an adapter reads it (lora_A saves its input: the module's own,
// or with lora_dropout its dropout's output and mask). Each adapter keeps its r-wide intermediate
// (lora_B's input).
void adapt_block(Layer& layer, const TransformerShape& s, const std::vector<Adapter>& adapters) {
  const std::string prefix = layer.name + ".";
  const auto r = Elements(s.lora.rank);
  std::set<std::string> adapted;
  double kept_by_adapters = 0, masks = 0, lora_flops = 0;
  for (const Adapter& adapter : adapters) {
    Elements in = 0, out = 0;
    for (const std::string& linear : adapter.linears) {
      const TensorSpec* weight = tensor_named(layer, prefix + linear + ".weight");
      if (!weight) break;
      out += weight->shape[0];
      in = weight->shape[1];
      adapted.insert(linear);
    }
    if (out == 0) continue;  // not a module of this block
    layer.params.push_back({prefix + adapter.path + ".lora_A.weight", {r, in}});
    layer.params.push_back({prefix + adapter.path + ".lora_B.weight", {out, r}});
    lora_flops += 2 * double(r) * double(in + out);
    kept_by_adapters += double(r);
    if (s.lora.dropout > 0) {
      kept_by_adapters += double(in);
      masks += double(in);
    }
  }
  if (s.lora.base_format != WeightFormat::TrainingDtype) {
    for (const std::string& linear : block_linears(s)) {
      if (TensorSpec* weight = tensor_named(layer, prefix + linear + ".weight"))
        weight->format = s.lora.base_format;
    }
  }
  const auto read = [&](std::initializer_list<const char*> linears) {
    if (s.lora.dropout > 0) return false;  // lora_A saves its dropout's output instead
    return std::any_of(linears.begin(), linears.end(),
                       [&](const char* linear) { return adapted.count(linear) > 0; });
  };
  const double h = double(s.hidden);
  const double q = double(s.heads) * double(s.effective_head_dim());
  const double f = double(s.ffn_hidden);
  double dropped = 0;
  if (!read({"attn.q_proj", "attn.k_proj", "attn.v_proj"})) dropped += h;
  if (!read({"attn.o_proj"})) dropped += q;
  if (!read({"mlp.fc_in", "mlp.gate_proj", "mlp.up_proj"})) dropped += h;
  if (!read({"mlp.fc_out", "mlp.down_proj"})) dropped += f;
  if (tensor_named(layer, prefix + "cross.q_proj.weight")) {  // a decoder's cross-attention
    if (!read({"cross.q_proj"})) dropped += h;
    if (!read({"cross.o_proj"})) dropped += q;
  }
  layer.activations.elements += kept_by_adapters - dropped;
  layer.activations.mask_bytes += masks;
  layer.matmul_flops_per_token += lora_flops;
}

}  // namespace

Elements stored_elements(Elements numel, WeightFormat format, Bytes element_bytes) {
  if (format == WeightFormat::TrainingDtype) return numel;
  return (numel + 1) / (2 * element_bytes);
}

Bytes quantization_state_bytes(Elements numel, WeightFormat format) {
  if (format == WeightFormat::TrainingDtype) return 0;
  constexpr Bytes kCode = 16 * 4;  // the NF4 code, one per tensor (get_4bit_type)
  const Elements blocks = ceil_div(numel, kNf4BlockSize);
  if (format == WeightFormat::Nf4) return blocks * 4 + kCode;
  constexpr Bytes kOffset = 4;  // absmax.mean(), subtracted before the second quantization
  return blocks + ceil_div(blocks, kNf4SecondBlockSize) * 4 + kOffset + kCode;
}

std::vector<std::string> lora_target_names(const TransformerShape& shape) {
  std::vector<std::string> names;
  for (const Module& module : modules_of(shape)) names.push_back(module.name);
  names.push_back(kAllLinear);
  return names;
}

std::vector<std::string> default_lora_targets(const TransformerShape& shape) {
  if (shape.architecture == Architecture::Encoder) return {"query", "value"};
  if (shape.architecture == Architecture::EncoderDecoder) return {"q", "v"};
  if (shape.mlp == MlpKind::Gelu) return {"c_attn"};
  if (shape.family == "phi3") return {"qkv_proj"};
  return {"q_proj", "v_proj"};
}

void check_lora(const TransformerShape& shape, const LoraKeys& keys) {
  const LoraConfig& lora = shape.lora;
  if (lora.rank == 0 && (!lora.targets.empty() || lora.base_format != WeightFormat::TrainingDtype))
    throw InputError(
        lora.base_format != WeightFormat::TrainingDtype ? keys.base_format : keys.targets,
        "needs LoRA adapters to train (" + keys.rank +
            "): a frozen base alone has nothing to train");
  if (lora.rank < 0 || lora.rank > 65536)
    throw InputError(keys.rank,
                     "must be between 1 and 65536 (got " + std::to_string(lora.rank) + ")");
  if (!(lora.dropout >= 0 && lora.dropout < 1)) throw InputError(keys.dropout, "must be in [0, 1)");
  const std::vector<std::string> names = lora_target_names(shape);
  for (const std::string& target : lora.targets) {
    if (std::find(names.begin(), names.end(), target) != names.end()) continue;
    const std::string suggestion = closest_name(target, names);
    std::string known;
    for (const std::string& name : names) known += (known.empty() ? "" : ", ") + name;
    throw InputError(keys.targets,
                     "'" + target + "' is no module of " + shape.family + "'s blocks" +
                         (suggestion.empty() ? "" : " (did you mean '" + suggestion + "'?)") +
                         "; its modules: " + known);
  }
}

void apply_lora(Model& model, const TransformerShape& shape) {
  check_lora(shape);
  if (model.tensor_parallel.active()) {
    throw InputError("--lora-rank",
                     "LoRA with tensor parallelism is not modelled (PEFT's adapters are not "
                     "split by Megatron's parallel layers); plan LoRA with --tp 1");
  }
  const std::vector<Adapter> adapters = adapters_of(shape);
  for (Layer& layer : model.layers) {
    for (TensorSpec& tensor : layer.params) tensor.trainable = false;
    layer.frozen_matmul_flops_per_token = layer.matmul_flops_per_token;
    layer.frozen_source_matmul_flops_per_token = layer.source_matmul_flops_per_token;
    switch (layer.kind) {
      case LayerKind::Embedding:
        // A frozen embedding has no backward: neither its token ids nor its gradient.
        layer.activations.fixed_bytes = 0;
        layer.activations.backward_working_elements = 0;
        break;
      case LayerKind::LmHead:  // frozen: its input is not kept (the logits still are, for the loss)
        layer.activations.elements -= double(shape.hidden);
        break;
      case LayerKind::FinalNorm:  // BERT's MLM transform: its frozen dense keeps no input
        if (layer.name == "mlm_transform") layer.activations.elements -= double(shape.hidden);
        break;
      case LayerKind::TransformerBlock:
        adapt_block(layer, shape, adapters);
        break;
      default:
        break;
    }
  }
}

Model with_lora(const Model& model, const LoraConfig& lora) {
  if (!model.shape) {
    throw InputError("--lora-rank", "LoRA adapts a transformer's modules: model '" + model.name +
                                        "' is a layer list without a transformer shape (use a "
                                        "preset or a Hugging Face config)");
  }
  TransformerShape shape = *model.shape;
  shape.lora = lora;
  Model rebuilt = build_transformer(model.name, shape);
  rebuilt.source = model.source;
  rebuilt.default_seq_len = model.default_seq_len;
  return rebuilt;
}

bool has_quantized_weights(const Model& model) {
  for (const Layer& layer : model.layers) {
    for (const TensorSpec& tensor : layer.params) {
      if (tensor.format != WeightFormat::TrainingDtype) return true;
    }
  }
  return false;
}

Model fine_tuned_like(const Model& candidate, const Model& reference) {
  if (!reference.shape || !reference.shape->lora.active()) return candidate;
  return with_lora(candidate, reference.shape->lora);
}

std::vector<std::string> lora_adapted_modules(const TransformerShape& shape) {
  const std::vector<Adapter> adapters = adapters_of(shape);
  const auto module_of = [](const Adapter& a) { return a.path.substr(a.path.find('.') + 1); };
  std::vector<std::string> names;
  for (const Adapter& adapter : adapters) {
    // GPT-2's two c_proj are told apart by their parent, as PEFT's names do.
    const std::string module = module_of(adapter);
    const auto same = std::count_if(adapters.begin(), adapters.end(),
                                    [&](const Adapter& a) { return module_of(a) == module; });
    names.push_back(same > 1 ? adapter.path : module);
  }
  return names;
}

namespace {
std::string grouped(Elements count) {
  std::string digits = std::to_string(count), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}
}  // namespace

std::string lora_summary(const Model& model) {
  const Elements total = model.parameter_count(), trainable = model.trainable_parameter_count();
  if (trainable == total) return "";
  char share[32];
  std::snprintf(share, sizeof share, "%.4f", 100.0 * double(trainable) / double(total));
  std::string text;
  if (model.shape && model.shape->lora.active()) {
    const LoraConfig& lora = model.shape->lora;
    std::string modules;
    for (const std::string& name : lora_adapted_modules(*model.shape))
      modules += (modules.empty() ? "" : ", ") + name;
    text = "LoRA r=" + std::to_string(lora.rank) + " on " + modules + ": ";
  }
  text += grouped(trainable) + " trainable of " + grouped(total) + " parameters (" + share + " %)";
  bool nf4 = false, double_quant = false;
  for (const Layer& layer : model.layers) {
    for (const TensorSpec& tensor : layer.params) {
      nf4 |= tensor.format != WeightFormat::TrainingDtype;
      double_quant |= tensor.format == WeightFormat::Nf4DoubleQuant;
    }
  }
  if (nf4)
    text += std::string("; base weights in NF4") +
            (double_quant ? " with double quantization" : " (fp32 absmax)");
  return text;
}

WeightFormat parse_weight_format(const std::string& text, const std::string& where) {
  if (text == "none") return WeightFormat::TrainingDtype;
  if (text == "nf4") return WeightFormat::Nf4DoubleQuant;
  if (text == "nf4-no-double-quant") return WeightFormat::Nf4;
  throw InputError(
      where, "unknown base format '" + text + "' (expected none, nf4 or nf4-no-double-quant)");
}

std::vector<std::string> parse_lora_targets(const std::string& text, const std::string& where) {
  std::vector<std::string> targets;
  std::string current;
  const auto finish = [&] {
    if (current.empty()) throw InputError(where, "an empty module name in '" + text + "'");
    targets.push_back(current);
    current.clear();
  };
  for (const char c : text) {
    if (c == ',') {
      finish();
    } else if (c != ' ') {
      current += c;
    }
  }
  finish();
  return targets;
}

}  // namespace zerolens
