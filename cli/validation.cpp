#include "cli/validation.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace zerolens::cli {
namespace {

constexpr Category kModelStates[] = {Category::Params, Category::Grads, Category::MasterParams,
                                     Category::OptimizerStates};

bool is_model_state(Category category) {
  return std::find(std::begin(kModelStates), std::end(kModelStates), category) != std::end(kModelStates);
}

// Per device: the peak, and the highest each category reaches (model states held to their
// tolerance, activations and buffers shown for information). Both sides are per rank.
void memory_checks(const Plan& plan, const exec::TrainingResult& measured, const Tolerances& tolerances,
                   std::vector<Check>& checks) {
  const MemoryTimeline predicted = replay_memory(plan.schedule, false);
  const auto highs = category_highs(plan.schedule);
  for (int d = 0; d < kDeviceCount; ++d) {
    const DevicePeak& device = predicted.devices[std::size_t(d)];
    const std::string name = to_string(Device(d));
    if (device.peak == 0 && measured.peak[std::size_t(d)] == 0) continue;
    checks.push_back({name + " peak", Unit::Bytes, double(device.peak), double(measured.peak[std::size_t(d)]),
                      tolerances.peak_memory});
    for (int c = 0; c < kCategoryCount; ++c) {
      const Category category = Category(c);
      const double p = double(highs[std::size_t(d)][std::size_t(c)]);
      const double m = double(measured.category_high[std::size_t(d)][std::size_t(c)]);
      if (p == 0 && m == 0) continue;
      const std::optional<double> tolerance =
          is_model_state(category) ? std::optional<double>(tolerances.model_states) : std::nullopt;
      checks.push_back({name + " " + to_string(category) + " (high)", Unit::Bytes, p, m, tolerance});
    }
  }
}

void collective_checks(const Plan& plan, const exec::TrainingResult& measured, const Tolerances& tolerances,
                       std::vector<Check>& checks) {
  for (int k = 0; k < kOpKindCount; ++k) {
    const OpKind kind = OpKind(k);
    const CollectiveTotals& p = plan.comm.of(kind);
    const exec::CollectiveCount& m = measured.collectives[std::size_t(k)];
    if (p.calls == 0 && m.calls == 0) continue;
    const std::string name = to_string(kind);
    checks.push_back({name + " bytes", Unit::Bytes, double(p.bytes), double(m.bytes), tolerances.collective_bytes});
    // Calls are shown, not held: one schedule op may be several library calls (a layer's tensors
    // gathered one by one), as frameworks coalesce or not.
    checks.push_back({name + " calls", Unit::Calls, double(p.calls), double(m.calls), std::nullopt});
  }
}

// Host-device copies and NVMe transfers, per link (held to the collective tolerance: both are
// bytes the schedule moves). A skipped fp16 step moves fewer; validate's steps do not skip.
void link_checks(const Plan& plan, const exec::TrainingResult& measured, const Tolerances& tolerances,
                 std::vector<Check>& checks) {
  const LinkTotals& p = plan.comm.links;
  const exec::LinkBytes& m = measured.links;
  const std::pair<const char*, std::pair<Bytes, Bytes>> links[] = {{"pcie_h2d bytes", {p.pcie_h2d, m.pcie_h2d}},
                                                                   {"pcie_d2h bytes", {p.pcie_d2h, m.pcie_d2h}},
                                                                   {"nvme_read bytes", {p.nvme_read, m.nvme_read}},
                                                                   {"nvme_write bytes", {p.nvme_write, m.nvme_write}}};
  for (const auto& [name, bytes] : links) {
    if (bytes.first == 0 && bytes.second == 0) continue;
    checks.push_back({name, Unit::Bytes, double(bytes.first), double(bytes.second), tolerances.collective_bytes});
  }
}

// The median step (the first steps pay for first touches of memory).
double median_step_seconds(const exec::TrainingResult& measured) {
  std::vector<double> seconds;
  for (const auto& step : measured.steps) seconds.push_back(step.seconds);
  if (seconds.empty()) return 0;
  std::nth_element(seconds.begin(), seconds.begin() + std::ptrdiff_t(seconds.size() / 2), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

double Check::error() const {
  if (predicted == 0) return measured == 0 ? 0 : std::numeric_limits<double>::infinity();
  return (measured - predicted) / predicted;
}

bool Check::passed() const { return !tolerance || std::abs(error()) <= *tolerance; }

std::vector<Check> compare_with_plan(const Plan& plan, const exec::TrainingResult& measured, const Timeline& predicted,
                                     const Tolerances& tolerances) {
  std::vector<Check> checks;
  memory_checks(plan, measured, tolerances, checks);
  collective_checks(plan, measured, tolerances, checks);
  link_checks(plan, measured, tolerances, checks);
  checks.push_back({"step time (median)", Unit::Seconds, predicted.step_time, median_step_seconds(measured),
                    tolerances.step_time});
  return checks;
}

}  // namespace zerolens::cli
