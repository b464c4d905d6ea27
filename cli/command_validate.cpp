// `zerolens validate`: predicts, runs the same plan on the executor, and prints predicted vs
// measured side by side with the error of each figure; exit 1 when a tolerance is exceeded.
#include <algorithm>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "cli/run_support.hpp"
#include "cli/timeline_options.hpp"
#include "cli/validation.hpp"
#include "cli/validation_report.hpp"
#include "sim/trace/trace.hpp"

namespace zerolens::cli {
namespace {

struct ValidateCommand {
  RunFlags run;
  TimelineFlags timeline;
  Tolerances tolerances;
  std::string predicted_trace;
};

int run_validate(ValidateCommand& command) {
  const std::unique_ptr<exec::Backend> backend = make_run_backend(command.run.device);
  const exec::Communicator& comm = backend->communicator();
  Diagnostics diagnostics;
  const Prediction predicted = predict(make_run_plan(command.run, *backend, diagnostics),
                                       {.timeline = command.timeline.options(),
                                        .trace_ranks = command.predicted_trace.empty() ? 0 : 1,
                                        .memory_states = true});
  const Plan& plan = predicted.plan;
  // The stage the plan reports (the one with the most GPU memory) is the one compared, by its
  // first rank, which prints the run.
  const bool recorder = comm.rank() == exec::recording_rank(plan);
  if (recorder) print_warnings(diagnostics);
  const exec::TrainingResult result = run_steps(plan, *backend, command.run, std::cout);
  if (!recorder) return kExitOk;
  // Compared through the measured trace, as `check-measured` compares a recorded one: the trace
  // holds every figure the check needs.
  const Trace measured_trace = exec::measured_trace(plan, result);
  const Measurement measured = measurement_of(measured_trace);  // the recorded stretch's step time
  if (comm.rank() > 0)
    std::cout << "\nmeasured on rank " << comm.rank() << ", the first of pipeline stage "
              << plan.pipeline_stage
              << " (the stage with the most GPU memory, which the plan reports)";
  std::cout << "\npredicted vs measured (bytes per rank; the step time is the lowest mean of "
            << result.recorded.count << " consecutive step(s), predicted on --cluster "
            << plan.request.cluster.name << "):\n";
  const std::vector<Check> checks =
      compare_with_prediction(predicted, measured, command.tolerances);
  const bool passed = print_checks(std::cout, checks);
  std::cout << describe(summarize_step_time({checks})) << '\n';
  if (!command.run.measured_trace.empty()) {
    Output(command.run.measured_trace).stream() << trace_to_json(measured_trace).dump(1) << '\n';
  }
  if (!command.predicted_trace.empty()) {
    Output(command.predicted_trace).stream() << trace_to_json(predicted.trace).dump(1) << '\n';
  }
  std::cout << (passed ? "validation passed\n" : "validation FAILED: a figure is outside its tolerance\n");
  return passed ? kExitOk : kExitCheckFailed;
}

}  // namespace

void register_validate_command(CLI::App& app, CommandRegistry& registry) {
  auto command = std::make_shared<ValidateCommand>();
  CLI::App* validate = app.add_subcommand(
      "validate", "Predict, run on the executor, and compare memory, traffic and time (exit 1 beyond tolerance)");
  add_run_options(*validate, command->run);
  add_timeline_options(*validate, command->timeline, "Timeline");
  add_tolerance_options(*validate, command->tolerances);
  validate->add_option("--predicted-trace", command->predicted_trace, "Write the predicted step (trace schema)")
      ->group("Training run");
  registry.add(validate, [command] { return run_validate(*command); });
}

}  // namespace zerolens::cli
