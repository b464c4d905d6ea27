#pragma once
// What the config panel edits: the loaded model and cluster, the training config (defaults, a
// DeepSpeed file or the walkthrough's) with the fields that have widgets written into it, and the
// data-parallel size. A plan request is built from it through sim's API, as the CLI builds one from
// flags.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sim/config/overrides.hpp"
#include "sim/plan/plan.hpp"
#include "sim/trace/trace.hpp"

namespace zerolens::gui {

struct Settings {
  Model model;
  std::string model_source;  // preset name, dense:<N> or the file it came from
  Cluster cluster;           // as loaded; sized to `gpus` by make_request
  std::string cluster_source;
  TrainingConfig config;
  std::string deepspeed_source;  // the DeepSpeed file the config started from, or ""
  int gpus = 8;  // every rank: data parallel x tensor parallel (config.tensor_parallel.size)
  int gpus_per_node = 0;  // <= 0: the cluster's
  ScheduleOptions options;
  bool walkthrough = false;  // started from the 4-GPU walkthrough (views default to its scale)
};

// GPT-2 1.5B on 8 x A100-40GB, fp16, ZeRO-3 with CPU optimizer offload, checkpointing on.
Settings default_settings();
// What `zerolens plan` assumes for whatever is not given: gpt2-124m on the 8 GPUs of
// dgx-a100-80gb, DeepSpeed's defaults (stage 0, fp32, no offload), micro-batch 1. The command line
// starts from it as soon as any config option is given.
Settings cli_default_settings();
// The 4-GPU ZeRO-3 walkthrough (sim/plan/walkthrough.hpp).
Settings walkthrough_settings();
// Throws InputError when the GPUs do not split into tensor-parallel groups.
PlanRequest make_request(const Settings& settings);

// Edits of the panel and the command line, applied by sim (apply_overrides) as the CLI's flags
// are, under the GUI's policy: a stage change clears the offloads the stage does not allow, NVMe
// offload gets an nvme_path (OverridePolicy::Interactive).
void apply_edits(Settings& settings, const ConfigOverrides& edits);
// One widget each.
void set_stage(Settings& settings, int stage);
void set_offload(Settings& settings, OffloadDevice optimizer, OffloadDevice param);
void set_precision(Settings& settings, Precision precision);
// The placement-policy control: DeepSpeed's ZeRO (nullopt), or ColossalAI's ShardedModelV2 with
// tensor_placement_policy cuda, cpu or auto (Gemini), which plans stage 3 in fp16 and clears
// DeepSpeed's offload blocks (the placement decides the offload).
void set_placement(Settings& settings, std::optional<PlacementPolicy> placement);
void set_shard_strategy(Settings& settings, ShardStrategy strategy);
// ZeRO-Offload's delayed parameter update (stages 1-2 with the optimizer on the CPU).
void set_delayed_update(Settings& settings, bool enabled);
// Like --micro-batch: keeps gradient_accumulation_steps, lets train_batch_size follow.
void set_micro_batch(Settings& settings, std::int64_t micro_batch);
void set_checkpointing(Settings& settings, bool enabled);
void set_seq_len(Settings& settings, std::optional<std::int64_t> seq_len);
// Like --tp and --sp: the GPUs stay, the data-parallel size becomes gpus / tensor_parallel.
void set_tensor_parallel(Settings& settings, int size);
void set_sequence_parallel(Settings& settings, bool enabled);
// Like --pp: the GPUs stay, the data-parallel size becomes gpus / (tensor x pipeline parallel).
void set_pipeline_parallel(Settings& settings, int stages);
// Ranks of the data-parallel group: gpus / (tensor x pipeline parallel).
int data_parallel_size(const Settings& settings);

// Sources. Each throws InputError naming the file or key.
void load_model_spec(Settings& settings, const std::string& spec, Diagnostics& diagnostics);
void load_cluster_spec(Settings& settings, const std::string& spec, Diagnostics& diagnostics);
void load_deepspeed_file(Settings& settings, const std::string& path, Diagnostics& diagnostics);
// A parsed DeepSpeed config becomes the training config (the sequence length, not a DeepSpeed key,
// stays the panel's when the document has none).
void apply_deepspeed_config(Settings& settings, const nlohmann::json& document, Diagnostics& diagnostics);

// The micro-batch the config asks for (train_batch_size / (accumulation x gpus) when only that is
// given).
std::int64_t micro_batch_of(const Settings& settings);

// Settings that re-plan the run a trace records. The model and cluster are loaded by name when they
// are presets; otherwise the current ones stay and a note says so.
Settings settings_for_trace(const Settings& current, const TraceRun& run,
                            std::vector<std::string>& notes);

}  // namespace zerolens::gui
