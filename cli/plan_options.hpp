#pragma once
// The flags every planning command shares (plan, trace, sweep, run, validate): each DeepSpeed
// field has a flag, and --set KEY=VALUE reaches any other key. The config flags are sim's
// ConfigOverrides, applied by sim as the GUI's edits are.
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "sim/config/overrides.hpp"
#include "sim/plan/plan.hpp"

namespace zerolens::cli {

// The config overrides (DeepSpeed fields: flags win over --deepspeed-config, --set over flags),
// where the model, cluster and config file come from, and the accounting.
struct PlanOptions : ConfigOverrides {
  std::string model = "gpt2-124m";
  std::optional<std::string> hf_config;
  std::optional<std::string> deepspeed_config;
  std::string cluster = "dgx-a100-80gb";
  std::optional<int> gpus;  // all ranks (data x tensor parallel)
  std::optional<int> dp;    // data-parallel ranks
  std::optional<int> gpus_per_node;
  std::optional<std::string> attention;
  std::optional<double> dropout;
  // Accounting.
  bool model_states_only = false;
  std::optional<double> cuda_context_gib, workspace_gib, fragmentation;
  std::optional<std::string> allocator;
};

void add_plan_options(CLI::App& app, PlanOptions& options);

// Reads the files, applies the flags and builds the request. Warnings go to `diagnostics`.
// Throws InputError naming the flag, key or file.
PlanRequest make_plan_request(const PlanOptions& options, Diagnostics& diagnostics);

}  // namespace zerolens::cli
