#pragma once
// Text and CSV renderings of plans and planning views. JSON lives in sim (plan_json.hpp).
#include <ostream>
#include <vector>

#include "sim/plan/deepspeed_estimators.hpp"
#include "sim/plan/plan.hpp"
#include "sim/plan/variants.hpp"

namespace zerolens::cli {

void print_plan(std::ostream& out, const Plan& plan, SizeUnit unit, bool show_components);
void print_plan_csv(std::ostream& out, const Plan& plan);

void print_compare(std::ostream& out, const VariantComparison& comparison, SizeUnit unit);
void print_compare_csv(std::ostream& out, const VariantComparison& comparison);
// One line per variant the planner refused: "left out: ZeRO-2: <reason>".
void print_left_out(std::ostream& out, const std::vector<LeftOutVariant>& left_out);

void print_max_models(std::ostream& out, const MaxModelSearch& search, const PlanRequest& base);
void print_max_models_csv(std::ostream& out, const std::vector<MaxModel>& results);

// DeepSpeed's estimator table for stages 2 and 3 next to zerolens's model-state figure and full
// figure for the same settings.
void print_deepspeed_estimates(std::ostream& out, const PlanRequest& base, SizeUnit unit);

std::string describe_setup(const Plan& plan);

}  // namespace zerolens::cli
