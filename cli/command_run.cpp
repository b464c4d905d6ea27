// `zerolens run`: trains GPT-2 on synthetic data with the ZeRO engine, exactly as the plan's
// schedule says (mpirun -np N zerolens run ...; one process works without mpirun), and reports
// what it measured: losses, step times, memory per device and category, collective traffic.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "cli/run_support.hpp"
#include "cli/table.hpp"
#include "sim/trace/trace.hpp"

namespace zerolens::cli {
namespace {

void print_header(std::ostream& out, const Plan& plan, const std::string& backend) {
  const ScheduleContext& c = plan.schedule.context;
  out << "zerolens run: " << plan.request.model.name << " (" << plan.request.model.parameter_count()
      << " parameters), ZeRO stage " << c.stage << ", " << to_string(c.precision) << ", "
      << c.dp_size << " rank(s)";
  if (c.tensor_parallel > 1 || c.pipeline_parallel > 1) {
    out << " data-parallel x " << c.tensor_parallel << " tensor-parallel"
        << (c.sequence_parallel ? " (sequence-parallel)" : "") << " x " << c.pipeline_parallel
        << " pipeline stage(s)";
  }
  out << ", micro-batch " << c.micro_batch << " x sequence " << c.seq_len
      << ", gradient accumulation " << c.grad_accumulation << "; " << backend << '\n';
  for (const auto& note : plan.notes) out << "note: " << note << '\n';
}

// The device named as the backend has it: on the CPU backend the "GPU" is host memory.
std::string device_label(Device device, const std::string& backend) {
  if (device != Device::Gpu) return to_string(device);
  return backend == "cpu" ? "gpu (host memory, CPU backend)" : "gpu";
}

// MB (1e6 bytes) with three decimals: the tiny models the executor trains are a few MB.
std::string megabytes(Bytes bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", double(bytes) / 1e6);
  return text;
}

void print_measured(std::ostream& out, const exec::TrainingResult& result,
                    const std::string& backend, int rank) {
  out << "\nmeasured on rank " << rank;
  if (rank > 0) out << " (pipeline stage " << result.pipeline_stage << ", the plan's)";
  out << " (peak over all steps; ranks are symmetric), MB = 1e6 bytes:\n";
  Table memory({"device", "peak", "params", "grads", "master", "optimizer", "activations", "buffers"});
  for (int d = 0; d < kDeviceCount; ++d) {
    if (result.peak[std::size_t(d)] == 0) continue;
    std::vector<std::string> row{device_label(Device(d), backend),
                                 megabytes(result.peak[std::size_t(d)])};
    for (int c = 0; c < 6; ++c)
      row.push_back(megabytes(result.at_peak[std::size_t(d)][std::size_t(c)]));
    memory.add_row(std::move(row));
  }
  memory.print(out);
  out << "\ncollectives of one step (bytes as nccl-tests counts them):\n";
  Table traffic({"group", "collective", "calls", "bytes"});
  const std::pair<const char*, const std::array<exec::CollectiveCount, kOpKindCount>*> groups[] = {
      {"dp", &result.collectives},
      {"tp", &result.tensor_parallel_collectives},
      {"pp", &result.pipeline_collectives},
      {"replicate", &result.replicate_collectives},
      {"hpz", &result.hpz_collectives},
      {"node", &result.node_collectives},
      {"cross-node", &result.cross_node_collectives},
      {"ep", &result.expert_parallel_collectives},
      {"expert-dp", &result.expert_data_collectives}};
  for (const auto& [group, counts] : groups) {
    for (int k = 0; k < kOpKindCount; ++k) {
      const auto& count = (*counts)[std::size_t(k)];
      if (count.calls > 0)
        traffic.add_row({group, to_string(OpKind(k)), std::to_string(count.calls),
                         std::to_string(count.bytes)});
    }
  }
  traffic.print(out);
}

// "{rank}" in a --measured-trace path: every rank writes its own ops there (the ranks' skew shows
// in their collectives' waits); without it rank 0 writes its trace.
constexpr std::string_view kRankField = "{rank}";

bool every_rank_traced(const std::string& path) {
  return path.find(kRankField) != std::string::npos;
}

std::string rank_trace_path(std::string path, int rank) {
  for (auto at = path.find(kRankField); at != std::string::npos; at = path.find(kRankField, at)) {
    path.replace(at, kRankField.size(), std::to_string(rank));
  }
  return path;
}

int run_run(const RunFlags& flags) {
  // First, on every rank: a device the build or a rank lacks stops the run before anything else.
  const std::unique_ptr<exec::Backend> backend = make_run_backend(flags.device);
  Diagnostics diagnostics;
  // What the executor refuses is refused here, by rank 0 alone, before the header.
  const Plan plan = make_run_plan(flags, *backend, diagnostics);
  const int rank = backend->communicator().rank();
  // One rank prints and records the run: the first of the stage the plan reports (rank 0 without
  // pipeline stages), so that its lines come in order.
  const bool recorder = rank == exec::recording_rank(plan);
  if (recorder) {
    print_warnings(diagnostics);
    print_header(std::cout, plan, backend->description());
  }
  const exec::TrainingResult result = run_steps(plan, *backend, flags, std::cout);
  if (!flags.measured_trace.empty() && (recorder || every_rank_traced(flags.measured_trace))) {
    Trace trace = exec::measured_trace(plan, result);
    for (TraceOp& op : trace.ops) op.rank = rank;
    const std::string path = rank_trace_path(flags.measured_trace, rank);
    Output(path).stream() << trace_to_json(trace).dump(1) << '\n';
    if (recorder) std::cout << "measured trace: " << path << '\n';
  }
  if (!recorder) return kExitOk;
  print_measured(std::cout, result, flags.device, rank);
  return kExitOk;
}

}  // namespace

void register_run_command(CLI::App& app, CommandRegistry& registry) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* command = app.add_subcommand(
      "run", "Train GPT-2 on synthetic data with the ZeRO engine (mpirun -np N zerolens run ...) and measure it");
  add_run_options(*command, *flags);
  registry.add(command, [flags] { return run_run(*flags); });
}

}  // namespace zerolens::cli
