#pragma once
// The flags every planning command shares (plan, and later trace, sweep, run, validate): each
// DeepSpeed field has a flag, and --set KEY=VALUE reaches any other key.
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "sim/plan.hpp"

namespace zerolens::cli {

struct PlanOptions {
  std::string model = "gpt2-124m";
  std::optional<std::string> hf_config;
  std::optional<std::string> deepspeed_config;
  std::string cluster = "dgx-a100-80gb";
  std::optional<int> gpus;
  std::optional<int> gpus_per_node;
  std::optional<std::string> attention;
  // DeepSpeed fields, applied as overrides on top of --deepspeed-config (flags win over the file).
  std::optional<int> stage;
  std::optional<std::string> offload_optimizer, offload_param, nvme_path;
  std::optional<bool> pin_memory;
  std::optional<std::int64_t> micro_batch, grad_accum, train_batch;
  std::optional<std::int64_t> seq_len;
  std::optional<std::string> precision;
  std::optional<std::string> optimizer;
  std::optional<double> momentum;
  std::optional<bool> activation_checkpointing, cpu_checkpointing, partition_activations;
  std::optional<double> reduce_bucket_size, allgather_bucket_size, prefetch_bucket_size,
      param_persistence_threshold, max_live_parameters, max_reuse_distance, sub_group_size;
  std::optional<bool> overlap_comm, contiguous_gradients, reduce_scatter;
  std::vector<std::string> set;
  // Accounting.
  bool model_states_only = false;
  std::optional<double> cuda_context_gib, workspace_gib, fragmentation;
};

void add_plan_options(CLI::App& app, PlanOptions& options);

// Reads the files, applies the flags and builds the request. Warnings go to `diagnostics`.
// Throws InputError naming the flag, key or file.
PlanRequest make_plan_request(const PlanOptions& options, Diagnostics& diagnostics);

}  // namespace zerolens::cli
