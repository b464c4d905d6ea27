#pragma once
// What `zerolens validate` and `zerolens check-measured` share around the comparison: the
// tolerance flags, the predicted-vs-measured table and its JSON form.
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json_fwd.hpp>

#include "cli/validation.hpp"

namespace zerolens::cli {

// --peak-tolerance, --model-state-tolerance, --collective-tolerance, --time-tolerance.
void add_tolerance_options(CLI::App& command, Tolerances& tolerances);

// The table of checks (quantity, predicted, measured, error, tolerance, ok/FAIL); true when all
// pass. A figure not compared shows why in the error column ("not compared (uncalibrated)") and no
// verdict.
bool print_checks(std::ostream& out, const std::vector<Check>& checks);

// [{"quantity", "group", "unit", "predicted", "measured", "error", "tolerance", "passed",
// "compared"},
// ...]; error is null when infinite or not compared, tolerance null when the figure is only shown
// or not compared; "not_compared" says why when "compared" is false.
nlohmann::json checks_json(const std::vector<Check>& checks);

// The step time over one or more compared runs (validate: one; check-measured: every trace).
struct StepTimeSummary {
  int runs = 0;                    // runs with a step-time check
  int compared = 0;                // of those, predicted on a calibrated cluster
  double mean_absolute_error = 0;  // over the compared runs, relative
  double max_absolute_error = 0;
  std::optional<double> tolerance;  // the tolerance they were held to (when compared)
};
StepTimeSummary summarize_step_time(const std::vector<std::vector<Check>>& runs);
// "step time: mean absolute error 6.12 % over 18 runs (largest 11.90 %, tolerance ±15.00 %)", or
// "step time: not compared (uncalibrated): ..." naming how to calibrate.
std::string describe(const StepTimeSummary& summary);
// {"runs", "compared", "mean_absolute_error", "max_absolute_error", "tolerance"} (errors null when
// none was compared).
nlohmann::json step_time_json(const StepTimeSummary& summary);

bool all_passed(const std::vector<Check>& checks);

}  // namespace zerolens::cli
