#pragma once
// The versioned JSON form of a plan (schema "zerolens.plan", documented in docs/plan-json.md).
#include <array>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/plan/plan.hpp"
#include "sim/plan/variants.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens {

inline constexpr int kPlanJsonVersion = 1;

nlohmann::json plan_to_json(const Plan& plan);
// `plan --compare --json` (schema "zerolens.compare"): each variant's label and plan, in order,
// and each variant left out with the planner's reason.
nlohmann::json compare_to_json(const VariantComparison& comparison);

// The figures of a plan as read back from its JSON (for consumers and round-trip checks).
struct PlanFigures {
  std::array<CategoryBytes, kDeviceCount> categories{};
  std::array<Bytes, kDeviceCount> totals{};
  std::array<Bytes, kDeviceCount> capacities{};
  std::array<CollectiveTotals, kOpKindCount> collectives{};
  LinkTotals links;
  bool fits = false;
  bool operator==(const PlanFigures&) const = default;
};

PlanFigures plan_figures(const Plan& plan);
// Throws InputError naming the key when the document is not a valid version-1 plan.
PlanFigures plan_figures_from_json(const nlohmann::json& json);

}  // namespace zerolens
