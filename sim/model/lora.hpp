#pragma once
// LoRA and QLoRA on a transformer (docs/model-format.md, "LoRA and QLoRA"): which modules take
// adapters, what the adapters and the frozen base hold, and how a 4-bit base weight is stored.
#include <string>
#include <vector>

#include "sim/core/units.hpp"
#include "sim/model/model.hpp"

namespace zerolens {

// bitsandbytes' 4-bit formats (functional.py quantize_4bit): blocks of 64 weights share one absmax.
inline constexpr Elements kNf4BlockSize = 64;
// Double quantization (compress_statistics): the absmax values quantized to 8 bits in blocks of
// 256, each with an fp32 absmax of its own (quantize_blockwise(absmax - offset, blocksize=256)).
inline constexpr Elements kNf4SecondBlockSize = 256;

// Elements of the training dtype that hold a tensor of `numel` values in `format`: numel, or for a
// 4-bit format the packed codes in quant_storage elements of `element_bytes` ((numel + 1) /
// (2 x itemsize), as bitsandbytes' quantize_4bit kernel allocates them).
Elements stored_elements(Elements numel, WeightFormat format, Bytes element_bytes);
// The quantization state bitsandbytes keeps beside a 4-bit tensor, on the device, whole on every
// rank (an attribute of the parameter, not partitioned by ZeRO-3): fp32 absmax per block of 64
// (Nf4), or with double quantization a uint8 absmax per block, an fp32 absmax per 256 blocks and
// the fp32 offset; and the 16-entry fp32 NF4 code (get_4bit_type). 0 for TrainingDtype.
Bytes quantization_state_bytes(Elements numel, WeightFormat format);

// The PEFT module names a shape's blocks have (GPT-2: c_attn, c_proj, c_fc; Phi-3: qkv_proj,
// o_proj, gate_up_proj, down_proj; LLaMA and the families built like it: q_proj ... down_proj),
// with "all-linear"; and PEFT's default targets
// (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
std::vector<std::string> lora_target_names(const TransformerShape& shape);
std::vector<std::string> default_lora_targets(const TransformerShape& shape);

// The keys a LoRA error names: the CLI's flags, or a model file's.
struct LoraKeys {
  std::string rank = "--lora-rank";
  std::string targets = "--lora-targets";
  std::string base_format = "--quantize-base";
  std::string dropout = "--lora-dropout";
};
// Throws InputError naming the key: a rank outside [1, 65536], a target the shape's blocks do not
// have (with the closest name), a 4-bit base without adapters.
void check_lora(const TransformerShape& shape, const LoraKeys& keys = {});

// build_transformer's last step when shape.lora is active: every tensor frozen, the adapters
// added to the blocks, the base weights stored in shape.lora.base_format, and the activations and
// FLOPs a frozen base changes.
void apply_lora(Model& model, const TransformerShape& shape);

// `model` fine-tuned with `lora` (rebuilt from its transformer shape; InputError for a layer list).
Model with_lora(const Model& model, const LoraConfig& lora);

// Whether any tensor of `model` is stored in a 4-bit format.
bool has_quantized_weights(const Model& model);
// `candidate` fine-tuned as `reference` is (its shape's LoRA), for planning views that swap the
// model (--max-model): `candidate` itself when `reference` trains every parameter.
Model fine_tuned_like(const Model& candidate, const Model& reference);

// The adapters a shape's LoRA adds to each block, as module names (c_attn, q_proj, mlp.c_proj).
std::vector<std::string> lora_adapted_modules(const TransformerShape& shape);
// "LoRA r=8 on q_proj, v_proj: 4,194,304 trainable of 6,742,609,920 parameters (0.0622 %); base
// in NF4 with double quantization", or "" for a model without frozen parameters; as PEFT's
// print_trainable_parameters counts them.
std::string lora_summary(const Model& model);

// "none", "nf4" (double quantization: the QLoRA paper's recipe) or "nf4-no-double-quant".
WeightFormat parse_weight_format(const std::string& text, const std::string& where);
// "q_proj,v_proj" (spaces ignored); InputError naming `where` for an empty name.
std::vector<std::string> parse_lora_targets(const std::string& text, const std::string& where);

}  // namespace zerolens
