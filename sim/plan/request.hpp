#pragma once
// What a front end asks to plan (the CLI's flags, the Python module's keywords): where the model,
// the cluster and the DeepSpeed config come from, the config overrides (sim's ConfigOverrides:
// they win over the config, --set over them), the job's GPUs and the accounting. One place turns
// it into a PlanRequest for every front end. Errors name the CLI flag (a Python keyword is the
// flag's name without its dashes) or the config key.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/config/overrides.hpp"
#include "sim/plan/plan.hpp"

namespace zerolens {

struct PlanInputs : ConfigOverrides {
  std::string model = "gpt2-124m";  // a preset, dense:N, or a JSON file
  std::optional<std::string> hf_config;
  std::optional<std::string> deepspeed_config;       // a file (DeepSpeed or ColossalAI zero fields)
  std::optional<nlohmann::json> deepspeed_document;  // or the config itself
  std::string cluster = "dgx-a100-80gb";
  std::optional<int> gpus;  // all ranks (data x tensor x pipeline parallel)
  std::optional<int> dp;    // data-parallel ranks
  std::optional<int> gpus_per_node;
  std::optional<std::string> attention;
  std::optional<double> dropout;
  // LoRA fine-tuning (sim/model/lora.hpp): the adapters' rank, the modules they adapt (a comma
  // list of PEFT names; default PEFT's for the family), the base's storage (none|nf4|
  // nf4-no-double-quant) and PEFT's lora_dropout.
  std::optional<int> lora_rank;
  std::optional<std::string> lora_targets;
  std::optional<std::string> quantize_base;
  std::optional<double> lora_dropout;
  // Accounting.
  bool model_states_only = false;
  std::optional<double> cuda_context_gib, workspace_gib, fragmentation;
  std::optional<std::string> allocator;
};

// The sweep's global batch when the inputs name none (no batch flag or keyword, no DeepSpeed
// config): this many samples per data-parallel rank. Returns the note saying so, or "" when the
// inputs name a batch and `request` is left as it is.
inline constexpr std::int64_t kSweepDefaultBatchPerRank = 8;
std::string default_sweep_batch(const PlanInputs& inputs, PlanRequest& request);

// Reads the files, applies the overrides and builds the request. Warnings go to `diagnostics`.
// Throws InputError naming the flag, key or file.
PlanRequest make_plan_request(const PlanInputs& inputs, Diagnostics& diagnostics);

}  // namespace zerolens
