#pragma once
// A sweep's report as JSON.
#include <nlohmann/json_fwd.hpp>

#include "sim/predict/sweep.hpp"

namespace zerolens {

// 2: layouts, ZeRO++, headroom, the Pareto front, families; `evaluated` no longer counts the
// skipped micro-batches (`enumerated` does).
inline constexpr int kSweepJsonVersion = 2;
// Schema "zerolens.sweep" (docs/sweep.md): the setup, counts, notes and every result in rank order.
nlohmann::json sweep_to_json(const SweepReport& report, const PlanRequest& base);

}  // namespace zerolens
