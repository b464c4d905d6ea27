// `zerolens check-measured`: holds measured traces recorded earlier (traces/measured/) to the
// simulator's current predictions without running anything: each trace is re-planned from its
// `run.inputs` and compared by the same function as `zerolens validate`; exit 1 when a figure is
// outside its tolerance, 2 when a file is not a measured trace the check can use.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "cli/validation.hpp"
#include "cli/validation_report.hpp"
#include "sim/core/json_read.hpp"
#include "sim/hardware/cluster_json.hpp"
#include "sim/trace/trace.hpp"
#include "sim/trace/trace_replan.hpp"

namespace zerolens::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSuffix = ".measured.json";

struct CheckMeasuredCommand {
  std::vector<std::string> paths;
  std::string cluster;  // re-predict on this cluster instead of the recorded one
  Tolerances tolerances;
  bool json = false;
  std::string output;
};

struct CheckedTrace {
  std::string file;
  TraceRun run;
  std::vector<Check> checks;
};

bool has_suffix(const std::string& name) {
  return name.size() >= std::string(kSuffix).size() && name.ends_with(kSuffix);
}

// Named files as given; directories searched recursively for *.measured.json, in path order.
std::vector<std::string> measured_files(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::error_code error;
    if (!fs::is_directory(path, error)) {
      if (!fs::exists(path, error)) throw InputError(path, "no such file or directory");
      if (!fs::is_regular_file(path, error))
        throw InputError(path, "is not a regular file (a FIFO, socket or device is not read)");
      files.push_back(path);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& entry : fs::recursive_directory_iterator(path)) {
      const fs::path& file = entry.path();
      if (entry.is_regular_file() && has_suffix(file.filename().string())) found.push_back(file.string());
    }
    if (found.empty()) throw InputError(path, std::string("no measured traces (*") + kSuffix + ") in this directory");
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

CheckedTrace check_file(const std::string& file, const std::optional<Cluster>& cluster,
                        const Tolerances& tolerances) {
  try {
    const Trace trace = trace_from_json(json_read::parse_json_file(file, file));
    const Measurement measured = measurement_of(trace);
    // The plan the trace's run was made from, by the simulator as it is now (on --cluster's machine
    // when given, as many ranks per node as the run had).
    PlanRequest request = replan_request(trace.run);
    if (cluster)
      request.cluster = with_ranks(*cluster, request.dp_size, request.cluster.node.gpus_per_node);
    const Prediction predicted = predict(std::move(request), {.memory_states = true});
    return {file, trace.run, compare_with_prediction(predicted, measured, tolerances)};
  } catch (const InputError& error) {
    if (error.where() == file) throw;
    throw InputError(file, error.what());
  }
}

std::string describe(const TraceRun& run) {
  return run.model + ", " + ZeroStage{run.stage}.name() + ", " + run.precision + ", " +
         std::to_string(run.dp_size) + " rank(s), optimizer on " +
         (run.optimizer_device == "none" ? "gpu" : run.optimizer_device) + ", parameters on " +
         (run.param_device == "none" ? "gpu" : run.param_device) + "; micro-batch " +
         std::to_string(run.micro_batch) + " x seq " + std::to_string(run.seq_len) +
         ", gradient accumulation " + std::to_string(run.grad_accumulation);
}

nlohmann::json run_json(const TraceRun& run) {
  nlohmann::json json = {{"model", run.model},
                         {"stage", run.stage},
                         {"precision", run.precision},
                         {"dp_size", run.dp_size},
                         {"optimizer_device", run.optimizer_device},
                         {"param_device", run.param_device},
                         {"micro_batch", run.micro_batch},
                         {"seq_len", run.seq_len},
                         {"grad_accumulation", run.grad_accumulation}};
  // The model-parallel sizes the run was planned with (1 when the trace has no inputs).
  const TrainingConfig* config = run.inputs ? &run.inputs->config : nullptr;
  json["tensor_parallel"] = config ? config->tensor_parallel.size : 1;
  json["pipeline_parallel"] = config ? config->pipeline.size : 1;
  return json;
}

StepTimeSummary step_time_of(const std::vector<CheckedTrace>& checked) {
  std::vector<std::vector<Check>> runs;
  for (const CheckedTrace& c : checked) runs.push_back(c.checks);
  return summarize_step_time(runs);
}

// tolerances.step_time: the tolerance a calibrated trace's step time is held to (the others' is not
// compared, "compared": false in its checks).
void print_json(std::ostream& out, const std::vector<CheckedTrace>& checked, const Tolerances& t, bool passed) {
  nlohmann::json traces = nlohmann::json::array();
  for (const CheckedTrace& c : checked) {
    traces.push_back({{"file", c.file}, {"run", run_json(c.run)}, {"passed", all_passed(c.checks)},
                      {"checks", checks_json(c.checks)}});
  }
  const nlohmann::json tolerances = {{"peak_memory", t.peak_memory},
                                     {"model_states", t.model_states},
                                     {"collective_bytes", t.collective_bytes},
                                     {"step_time", t.step_time}};
  out << nlohmann::json{{"schema", "zerolens.check-measured"},
                        {"version", 1},
                        {"tolerances", tolerances},
                        {"passed", passed},
                        {"step_time", step_time_json(step_time_of(checked))},
                        {"traces", traces}}
             .dump(1)
      << '\n';
}

std::size_t print_text(std::ostream& out, const std::vector<CheckedTrace>& checked) {
  std::size_t failed = 0;
  for (const CheckedTrace& c : checked) {
    out << c.file << ": " << describe(c.run) << '\n';
    const bool passed = print_checks(out, c.checks);
    failed += passed ? 0 : 1;
    out << (passed ? "ok" : "FAIL: a figure is outside its tolerance") << "\n\n";
  }
  return failed;
}

int run_check_measured(const CheckMeasuredCommand& command) {
  std::vector<CheckedTrace> checked;
  std::optional<Cluster> cluster;
  if (!command.cluster.empty()) {
    Diagnostics diagnostics;
    cluster = load_cluster(command.cluster, diagnostics);
    print_warnings(diagnostics);
  }
  for (const std::string& file : measured_files(command.paths)) {
    checked.push_back(check_file(file, cluster, command.tolerances));
  }
  const bool passed =
      std::all_of(checked.begin(), checked.end(), [](const CheckedTrace& c) { return all_passed(c.checks); });
  Output output(command.output);
  if (command.json) {
    print_json(output.stream(), checked, command.tolerances, passed);
  } else {
    output.stream() << "measured (recorded) vs predicted (sim now), bytes per rank; the step time "
                       "of the recorded "
                       "(fastest) step, predicted on the recorded cluster:\n\n";
    const std::size_t failed = print_text(output.stream(), checked);
    output.stream() << describe(step_time_of(checked)) << '\n';
    output.stream() << (passed ? "all " + std::to_string(checked.size()) + " measured traces within tolerance\n"
                               : std::to_string(failed) + " of " + std::to_string(checked.size()) +
                                     " measured traces outside tolerance\n");
  }
  return passed ? kExitOk : kExitCheckFailed;
}

}  // namespace

void register_check_measured_command(CLI::App& app, CommandRegistry& registry) {
  auto command = std::make_shared<CheckMeasuredCommand>();
  CLI::App* check = app.add_subcommand(
      "check-measured",
      "Hold recorded measured traces to the simulator's current predictions, without running anything (exit 1 "
      "beyond tolerance)");
  check->add_option("paths", command->paths,
                    "Measured trace files (zerolens validate --measured-trace), or directories searched "
                    "recursively for *.measured.json")
      ->required();
  check->add_option("--cluster", command->cluster,
                    "Predict on this cluster (a preset or a JSON file, e.g. one `zerolens "
                    "calibrate` wrote) instead "
                    "of the one each trace records");
  add_tolerance_options(*check, command->tolerances);
  check->add_flag("--json", command->json, "Print the checks as JSON (schema zerolens.check-measured)");
  check->add_option("-o,--output", command->output, "Write to FILE instead of stdout");
  registry.add(check, [command] { return run_check_measured(*command); });
}

}  // namespace zerolens::cli
