#pragma once
// The one comparison of a plan with a measurement, used by `zerolens validate` (just measured)
// and `zerolens check-measured` (recorded in a measured trace): memory per device and category,
// bytes and calls of every collective, bytes per host-device and NVMe link, and the step time,
// each with its error and the tolerance it is held to (none: shown for information). The step time
// is compared only when the prediction used a cluster `zerolens calibrate` measured
// (Cluster::calibration): on a datasheet cluster it is an estimate for other hardware.
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "sim/predict/prediction.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens::cli {

inline constexpr double kDefaultStepTimeTolerance = 0.15;

struct Tolerances {
  double peak_memory = 0.03;      // relative, per device
  double model_states = 0;        // relative, per device and model-state category (exact by default)
  double collective_bytes = 0;    // relative, per collective kind and per link (exact by default)
  double step_time = kDefaultStepTimeTolerance;  // relative; held only with a calibrated cluster
  bool hold_step_time = true;                    // false: shown with its error, not held
};

enum class Unit { Bytes, Calls, Seconds };

// What a check is about (the JSON's "group"): peak, model_state, memory (other categories),
// collective (bytes), calls, link (bytes), time.
enum class Figure { Peak, ModelState, Memory, Collective, Calls, Link, Time };
const char* to_string(Figure figure);

struct Check {
  std::string quantity;             // "gpu peak", "gpu optimizer_states (high)", "all_gather bytes", ...
  Figure figure = Figure::Peak;
  Unit unit = Unit::Bytes;
  double predicted = 0, measured = 0;
  std::optional<double> tolerance;  // none: information only
  std::string not_compared;  // why the figure is shown but not compared ("uncalibrated"), or empty
  bool compared() const { return not_compared.empty(); }
  double error() const;             // (measured - predicted) / predicted; 0 when both are 0
  bool passed() const;              // within the tolerance, or not held (information, not compared)
};

// The step time's check (Figure::Time) among `checks`, or nullptr.
const Check* step_time_check(const std::vector<Check>& checks);

// What the executor measured on one rank (ranks are symmetric).
struct Measurement {
  std::array<Bytes, kDeviceCount> peak{};                    // highest over all steps
  std::array<CategoryBytes, kDeviceCount> category_high{};   // highest each category reached
  std::array<TraceCollective, kOpKindCount> collectives{};   // one step, data-parallel group
  // The same over the tensor-parallel group and between pipeline stages (absent: not recorded).
  std::optional<std::array<TraceCollective, kOpKindCount>> tensor_parallel_collectives;
  std::optional<std::array<TraceCollective, kOpKindCount>> pipeline_collectives;
  // Hybrid sharding's replicate group and hpZ's secondary group (absent: not recorded).
  std::optional<std::array<TraceCollective, kOpKindCount>> replicate_collectives;
  std::optional<std::array<TraceCollective, kOpKindCount>> hpz_collectives;
  // ZeRO++ qgZ's hops among a node's ranks and across nodes (absent: not recorded).
  std::optional<std::array<TraceCollective, kOpKindCount>> node_collectives, cross_node_collectives;
  // Expert parallelism's EP and expert-data-parallel groups (absent: not recorded).
  std::optional<std::array<TraceCollective, kOpKindCount>> expert_parallel_collectives,
      expert_data_collectives;
  TraceLinkBytes links;                                      // one step
  double step_seconds = 0;
};

// The measurement a measured trace records (source "exec" with the summary's optional counts);
// InputError naming the key when the trace lacks one.
Measurement measurement_of(const Trace& measured);

// The prediction needs the timeline and the memory states (PredictionOptions::memory_states). The
// step time is held to `tolerances.step_time` when the prediction's cluster is calibrated, and
// not compared ("uncalibrated") otherwise.
std::vector<Check> compare_with_prediction(const Prediction& predicted, const Measurement& measured,
                                           const Tolerances& tolerances);

}  // namespace zerolens::cli
