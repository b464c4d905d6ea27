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
  command.add_option("--time-tolerance", tolerances.step_time,
                     "Step time (off by default: predict with a cluster from `zerolens calibrate`)")
      ->check(CLI::Range(0.0, 100.0))->group(group);
}

bool all_passed(const std::vector<Check>& checks) {
  return std::all_of(checks.begin(), checks.end(), [](const Check& check) { return check.passed(); });
}

bool print_checks(std::ostream& out, const std::vector<Check>& checks) {
  Table table({"quantity (rank 0)", "predicted", "measured", "error", "tolerance", ""});
  for (const Check& check : checks) {
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
    rows.push_back({{"quantity", check.quantity}, {"group", to_string(check.figure)}, {"unit", unit_name(check.unit)},
                    {"predicted", value_json(check.predicted, check.unit)},
                    {"measured", value_json(check.measured, check.unit)},
                    {"error", std::isfinite(error) ? nlohmann::json(error) : nlohmann::json()},
                    {"tolerance", check.tolerance ? nlohmann::json(*check.tolerance) : nlohmann::json()},
                    {"passed", check.passed()}});
  }
  return rows;
}

}  // namespace zerolens::cli
