#include "cli/validation_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/table.hpp"

namespace zerolens::cli {
namespace {

std::string figure(double value, Unit unit) {
  std::ostringstream text;
  if (unit == Unit::Seconds) text << std::fixed << std::setprecision(3) << value * 1e3 << " ms";
  else text << std::int64_t(std::llround(value));
  return text.str();
}

std::string percent(double fraction) {
  if (!std::isfinite(fraction)) return "inf";
  std::ostringstream text;
  text << std::showpos << std::fixed << std::setprecision(2) << fraction * 100 << "%";
  return text.str();
}

const char* unit_name(Unit unit) {
  switch (unit) {
    case Unit::Bytes: return "bytes";
    case Unit::Calls: return "calls";
    case Unit::Seconds: return "seconds";
  }
  return "";
}

nlohmann::json value_json(double value, Unit unit) {
  if (unit == Unit::Seconds) return value;
  return std::int64_t(std::llround(value));
}

}  // namespace

void add_tolerance_options(CLI::App& command, Tolerances& tolerances) {
  const char* group = "Tolerances (relative)";
  command.add_option("--peak-tolerance", tolerances.peak_memory, "Peak memory per device")
      ->capture_default_str()->check(CLI::Range(0.0, 10.0))->group(group);
  command.add_option("--model-state-tolerance", tolerances.model_states,
                     "Parameters, gradients, master weights and optimizer states per device (exact by default)")
      ->capture_default_str()->check(CLI::Range(0.0, 10.0))->group(group);
  command.add_option("--collective-tolerance", tolerances.collective_bytes,
                     "Bytes per collective kind and per host-device/NVMe link (exact by default)")
      ->capture_default_str()->check(CLI::Range(0.0, 10.0))->group(group);
  command
      .add_option(
          "--time-tolerance", tolerances.step_time,
          "Step time, held when the cluster was measured by `zerolens calibrate` (not compared on "
          "a datasheet cluster)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0))
      ->group(group);
  command
      .add_flag_function(
          "--time-info", [&tolerances](std::int64_t) { tolerances.hold_step_time = false; },
          "Show the step time and its error but do not hold it (traces recorded on a host whose "
          "speed drifts)")
      ->group(group);
}

bool all_passed(const std::vector<Check>& checks) {
  return std::all_of(checks.begin(), checks.end(), [](const Check& check) { return check.passed(); });
}

bool print_checks(std::ostream& out, const std::vector<Check>& checks) {
  Table table({"quantity (per rank)", "predicted", "measured", "error", "tolerance", ""});
  for (const Check& check : checks) {
    if (!check.compared()) {
      table.add_row({check.quantity, figure(check.predicted, check.unit),
                     figure(check.measured, check.unit),
                     "not compared (" + check.not_compared + ")", "", ""});
      continue;
    }
    const std::string tolerance = check.tolerance ? "±" + percent(*check.tolerance).substr(1) : "info";
    table.add_row({check.quantity, figure(check.predicted, check.unit), figure(check.measured, check.unit),
                   percent(check.error()), tolerance, check.passed() ? "ok" : "FAIL"});
  }
  table.print(out);
  return all_passed(checks);
}

nlohmann::json checks_json(const std::vector<Check>& checks) {
  nlohmann::json rows = nlohmann::json::array();
  for (const Check& check : checks) {
    const double error = check.error();
    const bool compared = check.compared();
    nlohmann::json row = {
        {"quantity", check.quantity},
        {"group", to_string(check.figure)},
        {"unit", unit_name(check.unit)},
        {"predicted", value_json(check.predicted, check.unit)},
        {"measured", value_json(check.measured, check.unit)},
        {"error", compared && std::isfinite(error) ? nlohmann::json(error) : nlohmann::json()},
        {"tolerance",
         compared && check.tolerance ? nlohmann::json(*check.tolerance) : nlohmann::json()},
        {"passed", check.passed()},
        {"compared", compared}};
    if (!compared) row["not_compared"] = check.not_compared;
    rows.push_back(std::move(row));
  }
  return rows;
}

StepTimeSummary summarize_step_time(const std::vector<std::vector<Check>>& runs) {
  StepTimeSummary summary;
  double sum = 0;
  for (const auto& checks : runs) {
    const Check* time = step_time_check(checks);
    if (!time) continue;
    ++summary.runs;
    if (!time->compared()) continue;
    ++summary.compared;
    const double error = std::abs(time->error());
    sum += error;
    summary.max_absolute_error = std::max(summary.max_absolute_error, error);
    if (time->tolerance) summary.tolerance = time->tolerance;
  }
  if (summary.compared > 0) summary.mean_absolute_error = sum / summary.compared;
  return summary;
}

std::string describe(const StepTimeSummary& s) {
  if (s.runs == 0) return "step time: none measured";
  const std::string runs = std::to_string(s.runs) + (s.runs == 1 ? " run" : " runs");
  if (s.compared == 0) {
    return "step time: not compared (uncalibrated): predicted on a datasheet cluster; measure this "
           "machine with "
           "`zerolens calibrate -o cluster.json` and predict with --cluster cluster.json";
  }
  std::ostringstream text;
  text << "step time: mean absolute error " << percent(s.mean_absolute_error).substr(1) << " over "
       << s.compared << (s.compared == 1 ? " run" : " runs");
  if (s.compared > 1) text << " (largest " << percent(s.max_absolute_error).substr(1);
  if (s.tolerance)
    text << (s.compared > 1 ? ", " : " (") << "tolerance ±" << percent(*s.tolerance).substr(1);
  if (s.compared > 1 || s.tolerance) text << ")";
  if (s.compared < s.runs)
    text << "; " << s.runs - s.compared << " of " << runs << " not compared (uncalibrated)";
  return text.str();
}

nlohmann::json step_time_json(const StepTimeSummary& s) {
  const bool any = s.compared > 0;
  return {{"runs", s.runs},
          {"compared", s.compared},
          {"mean_absolute_error", any ? nlohmann::json(s.mean_absolute_error) : nlohmann::json()},
          {"max_absolute_error", any ? nlohmann::json(s.max_absolute_error) : nlohmann::json()},
          {"tolerance", s.tolerance ? nlohmann::json(*s.tolerance) : nlohmann::json()}};
}

}  // namespace zerolens::cli
