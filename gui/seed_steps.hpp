#pragma once
// The seed document's 27-step "Visualize ZeRO-DP" table (/work/shared/seeds/003_*: four GPUs, the
// data split four ways, the model states partitioned, GPU 0's parameters broadcast for the forward
// and deleted after it, ..., gradients reduced to their owners, the update) as moments of a ZeRO-3
// schedule: each step is an op found by what the step shows (its kind, phase and layer), or the
// state before the first op where the seed pictures something the schedule has no op for (the data
// split, the memory of the model states). The walkthrough's 4-GPU schedule is the one it is
// written for; any schedule that gathers parameters in forward and reduce-scatters gradients in
// backward has the same moments.
#include <cstdint>
#include <string>
#include <vector>

#include "sim/plan/plan.hpp"

namespace zerolens::gui {

inline constexpr int kSeedStepCount = 27;

struct SeedStep {
  int number = 0;            // 1 .. kSeedStepCount, as the seed numbers its pictures
  std::string seed_caption;  // the seed's comment on the picture ("" where it has none)
  std::string zerolens;      // what the picture is in this schedule, in zerolens's words
  std::int64_t op = -1;      // where the cursor goes; -1: before the first op
  std::string title;         // a few words for a menu: "gather GPU 0's parameters"
};

// The 27 steps in the seed's order (their ops never go back), or none when the schedule has no
// gather in forward, no reduce-scatter in backward followed by another gather, or no optimizer
// step (it is not ZeRO-3), or when these come in another order.
std::vector<SeedStep> seed_steps(const Plan& plan);
// "Seed step 11 of 27 (gather GPU 0's parameters): Broadcasts model parameters of GPU 0 to other
// GPUs.\nIn zerolens: ..."
std::string seed_step_caption(const SeedStep& step);

}  // namespace zerolens::gui
