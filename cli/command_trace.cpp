// `zerolens trace`: the simulated timeline of one training step, written as the project's trace
// JSON (-o) and as Chrome Trace Event JSON for Perfetto (--chrome); --walkthrough narrates the
// 4-GPU toy step of the ZeRO walkthrough.
#include <iomanip>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "cli/plan_options.hpp"
#include "cli/timeline_options.hpp"
#include "cli/validators.hpp"
#include "sim/plan/walkthrough.hpp"
#include "sim/predict/prediction.hpp"
#include "sim/trace/chrome_trace.hpp"

namespace zerolens::cli {
namespace {

struct TraceCommand {
  PlanOptions options;
  TimelineFlags timeline;
  std::string output, chrome;
  std::optional<int> ranks;
  bool walkthrough = false;
};

// The walkthrough of the seed document (sim/plan/walkthrough.hpp, shared with the GUI); flags given
// on the command line win over its values.
void walkthrough_defaults(PlanOptions& o) {
  const WalkthroughSetup w;
  o.model = w.model;
  o.cluster = w.cluster;
  o.gpus = o.gpus.value_or(w.gpus);
  o.stage = o.stage.value_or(w.stage);
  o.precision = o.precision.value_or(w.precision);
  o.micro_batch = o.micro_batch.value_or(w.micro_batch);
  o.seq_len = o.seq_len.value_or(w.seq_len);
  o.param_persistence_threshold = o.param_persistence_threshold.value_or(double(w.param_persistence_threshold));
  o.max_reuse_distance = o.max_reuse_distance.value_or(double(w.max_reuse_distance));
  o.prefetch_bucket_size = o.prefetch_bucket_size.value_or(double(w.prefetch_bucket_size));
  o.reduce_bucket_size = o.reduce_bucket_size.value_or(double(w.reduce_bucket_size));
  o.contiguous_gradients = o.contiguous_gradients.value_or(w.contiguous_gradients);
}

void print_narrative(std::ostream& out, const Plan& plan, const Timeline& timeline) {
  const Schedule& schedule = plan.schedule;
  out << "Walkthrough: " << plan.request.model.name << " on " << schedule.context.dp_size
      << " GPUs, ZeRO stage " << schedule.context.stage << ". Each GPU trains on its quarter of the batch and\n"
      << "holds 1/" << schedule.context.dp_size
      << " of every parameter, gradient and optimizer state. One step, as rank 0 sees it\n"
      << "(every rank does the same on its own data and partition):\n\n";
  for (std::size_t i = 0; i < schedule.ops.size(); ++i) {
    out << std::setw(3) << i + 1 << ". [" << std::fixed << std::setprecision(1) << std::setw(7)
        << timeline.ops[i].start * 1e6 << " us] " << schedule.describe(i, plan.rank_model) << '\n';
    const std::string reason = op_reason(schedule, i, plan.rank_model);
    if (!reason.empty()) out << "                   why: " << reason << ".\n";
  }
  out << "\nThen the next step starts from the updated partitions.\n\n";
}

void print_summary(std::ostream& out, const Plan& plan, const Timeline& timeline) {
  const auto& gpu = plan.device(Device::Gpu);
  out << std::setprecision(4) << std::defaultfloat;
  out << "step time            " << timeline.step_time * 1e3 << " ms\n"
      << "throughput           " << timeline.tokens_per_second
      << " tokens/s (whole data-parallel group)\n"
      << "model FLOP/s per GPU " << timeline.model_flops_per_gpu / 1e12
      << " TFLOP/s (3 x forward, no recompute); MFU " << timeline.mfu * 100 << "%\n"
      << "hardware FLOP/s/GPU  " << timeline.hardware_flops_per_gpu / 1e12
      << " TFLOP/s (with recompute)\n"
      << "exposed comm         " << timeline.exposed_communication * 1e3
      << " ms (collectives busy while compute idles)\n"
      << "exposed offload      " << timeline.exposed_offload * 1e3
      << " ms (PCIe copies, NVMe and the CPU optimizer busy while compute idles)\n"
      << "GPU peak             " << format_bytes(gpu.peak, SizeUnit::GB) << " per rank\n";
}

int run_trace(TraceCommand& command) {
  if (command.walkthrough) walkthrough_defaults(command.options);
  Diagnostics diagnostics;
  const PlanRequest request = make_plan_request(command.options, diagnostics);
  print_warnings(diagnostics);
  const int ranks = command.ranks.value_or(std::min(request.dp_size, command.walkthrough ? 4 : 8));
  const Prediction prediction =
      predict(request, {.timeline = command.timeline.options(), .trace_ranks = ranks});
  const Plan& plan = prediction.plan;
  const Timeline& timeline = prediction.timeline;
  const Trace& trace = prediction.trace;
  if (command.walkthrough) print_narrative(std::cout, plan, timeline);
  print_summary(std::cout, plan, timeline);
  if (!command.output.empty()) {
    Output(command.output).stream() << trace_to_json(trace).dump(1) << '\n';
    std::cout << "trace: " << command.output << " (" << trace.ops.size() << " ops, " << ranks << " ranks)\n";
  }
  if (!command.chrome.empty()) {
    Output(command.chrome).stream() << chrome_trace_json(trace).dump() << '\n';
    std::cout << "chrome trace: " << command.chrome << " (open in https://ui.perfetto.dev)\n";
  }
  return kExitOk;
}

}  // namespace

void register_trace_command(CLI::App& app, CommandRegistry& registry) {
  auto command = std::make_shared<TraceCommand>();
  CLI::App* trace = app.add_subcommand("trace", "Simulate one training step's timeline and write traces");
  add_plan_options(*trace, command->options);
  auto* group = "Timeline and output";
  trace->add_option("-o,--output", command->output, "Write the zerolens trace JSON (traces/README.md)")->group(group);
  trace->add_option("--chrome", command->chrome, "Write Chrome Trace Event JSON (opens in Perfetto)")->group(group);
  trace->add_option("--ranks", command->ranks, "Ranks to record (symmetric; default min(dp, 8))")
      ->check(integer_in(1, 1 << 20))
      ->group(group);
  add_timeline_options(*trace, command->timeline, group);
  trace->add_flag("--walkthrough", command->walkthrough,
                  "The 4-GPU toy step of the ZeRO walkthrough (gpt2-tiny, stage 3, every tensor partitioned, "
                  "a reduce-scatter after each layer's backward)")
      ->group(group);
  registry.add(trace, [command] { return run_trace(*command); });
}

}  // namespace zerolens::cli
