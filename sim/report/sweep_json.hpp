#pragma once
// A sweep's report as JSON.
#include <nlohmann/json_fwd.hpp>

#include "sim/predict/sweep.hpp"

namespace zerolens {

inline constexpr int kSweepJsonVersion = 1;
// Schema "zerolens.sweep" (docs/sweep.md): the setup, counts, notes and every result in rank order.
nlohmann::json sweep_to_json(const SweepReport& report, const PlanRequest& base);

}  // namespace zerolens
