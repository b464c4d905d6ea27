#pragma once
// The flags every planning command shares (plan, trace, sweep, run, validate): each DeepSpeed
// field has a flag, and --set KEY=VALUE reaches any other key. The config flags are sim's
// ConfigOverrides, applied by sim as the GUI's edits are.
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "sim/plan/request.hpp"

namespace zerolens::cli {

// The flags' values: sim's PlanInputs (sim/plan/request.hpp), which make_plan_request reads.
using PlanOptions = PlanInputs;

void add_plan_options(CLI::App& app, PlanOptions& options);

}  // namespace zerolens::cli
