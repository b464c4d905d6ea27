#include "gui/settings.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "sim/config/overrides.hpp"
#include "sim/core/json_read.hpp"
#include "sim/hardware/cluster_json.hpp"
#include "sim/model/model_io.hpp"
#include "sim/model/presets.hpp"
#include "sim/plan/walkthrough.hpp"
#include "sim/trace/trace_replan.hpp"

namespace zerolens::gui {
namespace {

// A trace names its model and cluster; they are loaded again when that works (presets, files on
// this machine), else the current ones stay.
template <typename Load>
void reload(const std::string& what, const std::string& name, Load load,
            std::vector<std::string>& notes) {
  try {
    Diagnostics diagnostics;
    load(name, diagnostics);
  } catch (const InputError& error) {
    notes.push_back("the trace's " + what + " '" + name + "' cannot be loaded here (" +
                    error.what() + "); the current " + what + " is planned instead");
  }
}

Settings on_presets(const std::string& model, const std::string& cluster) {
  Settings s;
  s.model = model_from_preset(model);
  s.model_source = model;
  s.cluster = cluster_from_preset(cluster);
  s.cluster_source = cluster;
  s.gpus = s.cluster.total_gpus();
  return s;
}

}  // namespace

Settings default_settings() {
  Settings s = on_presets("gpt2-1.5b", "dgx-a100-40gb");
  apply_edits(s, {.stage = 3,
                  .offload_optimizer = OffloadDevice::Cpu,
                  .offload_param = OffloadDevice::None,
                  .micro_batch = 4,
                  .precision = Precision::Fp16,
                  .activation_checkpointing = true});
  return s;
}

Settings cli_default_settings() {
  Settings s = on_presets("gpt2-124m", "dgx-a100-80gb");
  apply_edits(s, {.micro_batch = 1});
  return s;
}

Settings walkthrough_settings() {
  const WalkthroughSetup setup;
  PlanRequest request = walkthrough_request();
  Settings s;
  s.model = std::move(request.model);
  s.model_source = setup.model;
  s.cluster = std::move(request.cluster);
  s.cluster_source = setup.cluster;
  s.config = std::move(request.config);
  s.gpus = request.dp_size;
  s.options = request.options;
  s.walkthrough = true;
  return s;
}

PlanRequest make_request(const Settings& s) {
  PlanRequest request;
  request.model = s.model;
  request.config = s.config;
  // s.gpus counts every rank; with tensor and pipeline parallelism the data-parallel group is a
  // (TP x PP)-th of them.
  const int tp = std::max(1, s.config.model_parallel_size());
  if (s.gpus % tp != 0) {
    throw InputError("gpus",
                     std::to_string(s.gpus) + " GPUs do not split into tensor-parallel groups of " +
                         std::to_string(tp) + " (the GPUs must be a multiple of the TP size)");
  }
  request.dp_size = data_parallel_size(s);
  request.cluster = with_ranks(s.cluster, s.gpus, s.gpus_per_node);
  request.options = s.options;
  return request;
}

void apply_edits(Settings& s, const ConfigOverrides& edits) {
  Diagnostics diagnostics;  // typed edits only: nothing is read that could be warned about
  apply_overrides(s.config, edits, diagnostics, std::nullopt, OverridePolicy::Interactive);
}

void set_stage(Settings& s, int stage) {
  apply_edits(s, {.stage = stage});
}

void set_offload(Settings& s, OffloadDevice optimizer, OffloadDevice param) {
  apply_edits(s, {.offload_optimizer = optimizer, .offload_param = param});
}

void set_precision(Settings& s, Precision precision) {
  apply_edits(s, {.precision = precision});
}

void set_placement(Settings& s, std::optional<PlacementPolicy> placement) {
  if (!placement) return apply_edits(s, {.framework = Framework::DeepSpeed});
  apply_edits(s, {.framework = Framework::ColossalAi,
                  .placement = placement,
                  .offload_optimizer = OffloadDevice::None,
                  .offload_param = OffloadDevice::None});
}

void set_shard_strategy(Settings& s, ShardStrategy strategy) {
  apply_edits(s, {.shard_strategy = strategy});
}

void set_delayed_update(Settings& s, bool enabled) {
  apply_edits(s, {.delayed_param_update = enabled});
}

void set_micro_batch(Settings& s, std::int64_t micro_batch) {
  apply_edits(s, {.micro_batch = micro_batch});
}

void set_checkpointing(Settings& s, bool enabled) {
  apply_edits(s, {.activation_checkpointing = enabled});
}

void set_seq_len(Settings& s, std::optional<std::int64_t> seq_len) {
  apply_edits(s, {.seq_len = seq_len.value_or(0)});
}

void set_tensor_parallel(Settings& s, int size) {
  apply_edits(s, {.tensor_parallel = size});
}

void set_sequence_parallel(Settings& s, bool enabled) {
  apply_edits(s, {.sequence_parallel = enabled});
}

void set_pipeline_parallel(Settings& s, int stages) {
  apply_edits(s, {.pipeline_parallel = stages});
}

int data_parallel_size(const Settings& s) {
  return std::max(1, s.gpus / std::max(1, s.config.model_parallel_size()));
}

void load_model_spec(Settings& s, const std::string& spec, Diagnostics& diagnostics) {
  s.model = load_model(spec, diagnostics);
  s.model_source = spec;
}

void load_cluster_spec(Settings& s, const std::string& spec, Diagnostics& diagnostics) {
  s.cluster = load_cluster(spec, diagnostics);
  s.cluster_source = spec;
}

void apply_deepspeed_config(Settings& s, const nlohmann::json& document, Diagnostics& diagnostics) {
  std::optional<std::int64_t> hidden;
  if (s.model.shape) hidden = s.model.shape->hidden;
  TrainingConfig config = parse_training_config(document, diagnostics, hidden);
  if (!config.seq_len) config.seq_len = s.config.seq_len;  // not a DeepSpeed key: keep the panel's
  s.config = std::move(config);
}

void load_deepspeed_file(Settings& s, const std::string& path, Diagnostics& diagnostics) {
  apply_deepspeed_config(s, json_read::parse_json_file(path, "DeepSpeed config"), diagnostics);
  s.deepspeed_source = path;
}

std::int64_t micro_batch_of(const Settings& s) {
  try {
    return resolve_batch(s.config.batch, data_parallel_size(s)).micro_batch_per_gpu;
  } catch (const InputError&) {
    return s.config.batch.micro_batch_per_gpu.value_or(1);
  }
}

Settings settings_for_trace(const Settings& current, const TraceRun& run,
                            std::vector<std::string>& notes) {
  // gpt2-tiny traces are the walkthrough's: start from its ZeRO settings (every tensor
  // partitioned), which a trace does not record.
  Settings s = run.model == WalkthroughSetup{}.model ? walkthrough_settings() : current;
  s.walkthrough = false;
  reload(
      "model", run.model,
      [&](const std::string& name, Diagnostics& d) { load_model_spec(s, name, d); }, notes);
  reload(
      "cluster", run.cluster,
      [&](const std::string& name, Diagnostics& d) { load_cluster_spec(s, name, d); }, notes);
  if (s.model.parameter_count() != run.parameter_count) {
    notes.push_back("the trace's model has " + format_count(double(run.parameter_count)) +
                    " parameters, the planned model " +
                    format_count(double(s.model.parameter_count())));
  }
  s.gpus = run.dp_size;
  s.gpus_per_node = run.gpus_per_node;
  s.config = config_for_run(run, std::move(s.config));
  // What the trace was planned from, when it says: the same schedule, op for op.
  if (std::optional<PlanRequest> recorded = recorded_request(run)) {
    s.model = std::move(recorded->model);
    s.config = std::move(recorded->config);
    s.cluster = std::move(recorded->cluster);
    s.options = recorded->options;
    s.deepspeed_source.clear();
  } else {
    // A trace without its inputs comes from a run without tensor parallelism (the executor
    // refuses --tp); the current TP size must not carry over.
    s.config.tensor_parallel = {};
  }
  // The trace records the data-parallel size; the GUI's GPUs count every rank.
  s.gpus = run.dp_size * std::max(1, s.config.model_parallel_size());
  return s;
}

}  // namespace zerolens::gui
