#include "cli/validation.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <stdexcept>

#include "sim/core/error.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens::cli {
namespace {

constexpr Category kModelStates[] = {Category::Params, Category::Grads, Category::MasterParams,
                                     Category::OptimizerStates};

bool is_model_state(Category category) {
  return std::find(std::begin(kModelStates), std::end(kModelStates), category) != std::end(kModelStates);
}

// Overhead the executor charged beyond the plan's: on a GPU, what cudaMemGetInfo showed the CUDA
// libraries take when the model created its cuBLAS handles, beyond the workspace the model gives
// them (measured on an H200 with CUDA 13: 66 MiB, traces/measured/nvidia-h200). The libraries
// allocate it themselves, outside any allocator, as PyTorch's max_memory_allocated leaves it out;
// it is charged once, before the first op, so the peak of the schedule's own memory is the
// measured peak less this. On a GPU shared by ranks, other ranks' allocations made meanwhile land
// in it too.
Bytes driver_side_overhead(const CategoryBytes& predicted_highs,
                           const CategoryBytes& measured_highs) {
  const auto overhead = std::size_t(Category::Overhead);
  return std::max<Bytes>(0, measured_highs[overhead] - predicted_highs[overhead]);
}

// Per device: the peak of the schedule's memory (held), the measured peak with driver-side overhead
// (shown), and the highest each category reaches (model states held to their tolerance,
// activations, buffers and overhead shown for information). Both sides are per rank.
void memory_checks(const MemoryTimeline& predicted, const Measurement& measured,
                   const Tolerances& tolerances, std::vector<Check>& checks) {
  if (predicted.states.empty())
    throw std::logic_error("compare_with_prediction needs the memory states");
  const auto highs = category_highs(predicted);
  for (int d = 0; d < kDeviceCount; ++d) {
    const DevicePeak& device = predicted.devices[std::size_t(d)];
    const std::string name = to_string(Device(d));
    if (device.peak == 0 && measured.peak[std::size_t(d)] == 0) continue;
    const Bytes driver_side =
        driver_side_overhead(highs[std::size_t(d)], measured.category_high[std::size_t(d)]);
    const double measured_peak = double(measured.peak[std::size_t(d)]);
    checks.push_back({name + " peak", Figure::Peak, Unit::Bytes, double(device.peak),
                      measured_peak - double(driver_side), tolerances.peak_memory});
    if (driver_side > 0) {
      checks.push_back({name + " peak with driver-side overhead", Figure::Memory, Unit::Bytes,
                        double(device.peak), measured_peak, std::nullopt});
    }
    for (int c = 0; c < kCategoryCount; ++c) {
      const Category category = Category(c);
      const double p = double(highs[std::size_t(d)][std::size_t(c)]);
      const double m = double(measured.category_high[std::size_t(d)][std::size_t(c)]);
      if (p == 0 && m == 0) continue;
      const bool state = is_model_state(category);
      const std::optional<double> tolerance = state ? std::optional<double>(tolerances.model_states) : std::nullopt;
      checks.push_back({name + " " + to_string(category) + " (high)", state ? Figure::ModelState : Figure::Memory,
                        Unit::Bytes, p, m, tolerance});
    }
  }
}

// One group's collectives: bytes per kind held, calls shown. `prefix` names the group ("" for
// the data-parallel group, as traces before other groups named it; "tp ", "pp ", "node ",
// "cross-node ").
void group_checks(const std::string& prefix,
                  const std::array<CollectiveTotals, kOpKindCount>& predicted,
                  const std::array<TraceCollective, kOpKindCount>& measured,
                  const Tolerances& tolerances, std::vector<Check>& checks) {
  for (int k = 0; k < kOpKindCount; ++k) {
    const OpKind kind = OpKind(k);
    const CollectiveTotals& p = predicted[std::size_t(k)];
    const TraceCollective& m = measured[std::size_t(k)];
    if (p.calls == 0 && m.calls == 0) continue;
    const std::string name = prefix + to_string(kind);
    checks.push_back({name + " bytes", Figure::Collective, Unit::Bytes, double(p.bytes), double(m.bytes),
                      tolerances.collective_bytes});
    // Calls are shown, not held: one schedule op may be several library calls (a layer's tensors
    // gathered one by one), as frameworks coalesce or not.
    checks.push_back({name + " calls", Figure::Calls, Unit::Calls, double(p.calls), double(m.calls), std::nullopt});
  }
}

bool any_calls(const std::array<CollectiveTotals, kOpKindCount>& totals) {
  for (const CollectiveTotals& t : totals) {
    if (t.calls > 0) return true;
  }
  return false;
}

// Every group the plan has, each against what was counted on that group's communicator.
void collective_checks(const Plan& plan, const Measurement& measured, const Tolerances& tolerances,
                       std::vector<Check>& checks) {
  group_checks("", plan.comm.collectives, measured.collectives, tolerances, checks);
  const std::pair<const std::array<CollectiveTotals, kOpKindCount>*,
                  const std::optional<std::array<TraceCollective, kOpKindCount>>*>
      groups[] = {{&plan.comm.tensor_parallel, &measured.tensor_parallel_collectives},
                  {&plan.comm.pipeline, &measured.pipeline_collectives},
                  {&plan.comm.replicate, &measured.replicate_collectives},
                  {&plan.comm.secondary, &measured.hpz_collectives},
                  {&plan.comm.node_local, &measured.node_collectives},
                  {&plan.comm.cross_node, &measured.cross_node_collectives},
                  {&plan.comm.expert_parallel, &measured.expert_parallel_collectives},
                  {&plan.comm.expert_data, &measured.expert_data_collectives}};
  const char* prefixes[] = {"tp ",   "pp ",         "replicate ", "hpz ",
                            "node ", "cross-node ", "ep ",        "expert-dp "};
  const char* keys[] = {"summary.tensor_parallel_collectives",
                        "summary.pipeline_collectives",
                        "summary.replicate_collectives",
                        "summary.hpz_collectives",
                        "summary.node_collectives",
                        "summary.cross_node_collectives",
                        "summary.expert_parallel_collectives",
                        "summary.expert_data_collectives"};
  for (std::size_t g = 0; g < std::size(groups); ++g) {
    const auto& [predicted, counted] = groups[g];
    if (!counted->has_value()) {
      if (!any_calls(*predicted)) continue;
      throw InputError(keys[g],
                       "missing: the plan has this group's collectives, the measured "
                       "trace does not count them (record the run again)");
    }
    group_checks(prefixes[g], *predicted, **counted, tolerances, checks);
  }
}

// Host-device copies and NVMe transfers, per link (held to the collective tolerance: both are
// bytes the schedule moves). A skipped fp16 step moves fewer; validate's steps do not skip.
void link_checks(const Plan& plan, const Measurement& measured, const Tolerances& tolerances,
                 std::vector<Check>& checks) {
  const LinkTotals& p = plan.comm.links;
  const TraceLinkBytes& m = measured.links;
  const std::pair<const char*, std::pair<Bytes, Bytes>> links[] = {{"pcie_h2d bytes", {p.pcie_h2d, m.pcie_h2d}},
                                                                   {"pcie_d2h bytes", {p.pcie_d2h, m.pcie_d2h}},
                                                                   {"nvme_read bytes", {p.nvme_read, m.nvme_read}},
                                                                   {"nvme_write bytes", {p.nvme_write, m.nvme_write}}};
  for (const auto& [name, bytes] : links) {
    if (bytes.first == 0 && bytes.second == 0) continue;
    checks.push_back({name, Figure::Link, Unit::Bytes, double(bytes.first), double(bytes.second),
                      tolerances.collective_bytes});
  }
}

template <typename T>
const T& recorded(const std::optional<T>& value, const char* key) {
  if (!value) {
    throw InputError(key, "missing: the comparison needs the executor's counts (measured traces written by "
                          "`zerolens validate --measured-trace` record them; record the run again)");
  }
  return *value;
}

}  // namespace

const char* to_string(Figure figure) {
  switch (figure) {
    case Figure::Peak: return "peak";
    case Figure::ModelState: return "model_state";
    case Figure::Memory: return "memory";
    case Figure::Collective: return "collective";
    case Figure::Calls: return "calls";
    case Figure::Link: return "link";
    case Figure::Time: return "time";
  }
  return "";
}

double Check::error() const {
  if (predicted == 0) return measured == 0 ? 0 : std::numeric_limits<double>::infinity();
  return (measured - predicted) / predicted;
}

bool Check::passed() const {
  return !compared() || !tolerance || std::abs(error()) <= *tolerance;
}

const Check* step_time_check(const std::vector<Check>& checks) {
  const auto it = std::find_if(checks.begin(), checks.end(),
                               [](const Check& c) { return c.figure == Figure::Time; });
  return it == checks.end() ? nullptr : &*it;
}

Measurement measurement_of(const Trace& measured) {
  if (measured.source != "exec") {
    throw InputError("source", "\"" + measured.source + "\" is a predicted trace; a measured one (\"exec\") is needed");
  }
  const TraceSummary& s = measured.summary;
  return {.peak = s.peak,
          .category_high = recorded(s.category_highs, "summary.category_highs"),
          .collectives = recorded(s.collectives, "summary.collectives"),
          .tensor_parallel_collectives = s.tensor_parallel_collectives,
          .pipeline_collectives = s.pipeline_collectives,
          .replicate_collectives = s.replicate_collectives,
          .hpz_collectives = s.hpz_collectives,
          .node_collectives = s.node_collectives,
          .cross_node_collectives = s.cross_node_collectives,
          .expert_parallel_collectives = s.expert_parallel_collectives,
          .expert_data_collectives = s.expert_data_collectives,
          .links = recorded(s.link_bytes, "summary.link_bytes"),
          .step_seconds = s.step_time};
}

std::vector<Check> compare_with_prediction(const Prediction& predicted, const Measurement& measured,
                                           const Tolerances& tolerances) {
  std::vector<Check> checks;
  memory_checks(predicted.memory, measured, tolerances, checks);
  collective_checks(predicted.plan, measured, tolerances, checks);
  link_checks(predicted.plan, measured, tolerances, checks);
  Check time{"step time",           Figure::Time,
             Unit::Seconds,         predicted.timeline.step_time,
             measured.step_seconds, tolerances.step_time};
  if (!predicted.plan.request.cluster.calibration) {
    time.tolerance = std::nullopt;
    time.not_compared = "uncalibrated";
  } else if (!tolerances.hold_step_time) {
    time.tolerance = std::nullopt;  // information
  }
  checks.push_back(std::move(time));
  return checks;
}

}  // namespace zerolens::cli
