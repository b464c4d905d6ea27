#pragma once
// What `zerolens validate` and `zerolens check-measured` share around the comparison: the
// tolerance flags, the predicted-vs-measured table and its JSON form.
#include <ostream>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json_fwd.hpp>

#include "cli/validation.hpp"

namespace zerolens::cli {

// --peak-tolerance, --model-state-tolerance, --collective-tolerance, --time-tolerance.
void add_tolerance_options(CLI::App& command, Tolerances& tolerances);

// The table of checks (quantity, predicted, measured, error, tolerance, ok/FAIL); true when all pass.
bool print_checks(std::ostream& out, const std::vector<Check>& checks);

// [{"quantity", "group", "unit", "predicted", "measured", "error", "tolerance", "passed"}, ...]; error is
// null when infinite, tolerance null when the figure is only shown.
nlohmann::json checks_json(const std::vector<Check>& checks);

bool all_passed(const std::vector<Check>& checks);

}  // namespace zerolens::cli
