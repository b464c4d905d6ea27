#pragma once
// The one comparison of a plan with a measurement, used by `zerolens validate` (just measured)
// and `zerolens check-measured` (recorded in a measured trace): memory per device and category,
// bytes and calls of every collective, bytes per host-device and NVMe link, and the step time,
// each with its error and the tolerance it is held to (none: shown for information).
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "sim/predict/prediction.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens::cli {

struct Tolerances {
  double peak_memory = 0.03;      // relative, per device
  double model_states = 0;        // relative, per device and model-state category (exact by default)
  double collective_bytes = 0;    // relative, per collective kind and per link (exact by default)
  std::optional<double> step_time;  // relative; off by default (needs a calibrated cluster)
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
  double error() const;             // (measured - predicted) / predicted; 0 when both are 0
  bool passed() const;
};

// What the executor measured on one rank (ranks are symmetric).
struct Measurement {
  std::array<Bytes, kDeviceCount> peak{};                    // highest over all steps
  std::array<CategoryBytes, kDeviceCount> category_high{};   // highest each category reached
  std::array<TraceCollective, kOpKindCount> collectives{};   // one step
  TraceLinkBytes links;                                      // one step
  double step_seconds = 0;
};

// The measurement a measured trace records (source "exec" with the summary's optional counts);
// InputError naming the key when the trace lacks one.
Measurement measurement_of(const Trace& measured);

// The prediction needs the timeline and the memory states (PredictionOptions::memory_states).
std::vector<Check> compare_with_prediction(const Prediction& predicted, const Measurement& measured,
                                           const Tolerances& tolerances);

}  // namespace zerolens::cli
