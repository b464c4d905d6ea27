#pragma once
// The walkthrough's key moments as ops of the schedule: a layer's parameters gathered, released,
// gradients reduced to their owners, the owners' update, and the GPU's peak.
#include <cstdint>

#include "sim/plan/plan.hpp"

namespace zerolens::gui {

enum class Moment { Gather, Release, Reduce, Update, Peak };

bool is_moment(const Op& op, Moment moment);
// The next op after `from` that is such a moment, wrapping around to the start of the step; -1 when
// the schedule has none. Peak: the op at which the GPU peak is reached.
std::int64_t next_moment(const Plan& plan, std::int64_t from, Moment moment);
const char* to_string(Moment moment);

}  // namespace zerolens::gui
