#pragma once
// Words for the op under the step cursor: what the rank does (Schedule::describe) and, for the
// data that moves, over which link and how much each rank sends.
#include <QString>
#include <cstdint>
#include <string>
#include <vector>

#include "gui/session.hpp"

namespace zerolens::gui {

// Decimal units as everywhere in zerolens, sized to the value: "512 B", "36.9 kB", "48.0 MB", "3.12
// GB".
std::string human_bytes(Bytes bytes);
// "each of the 4 ranks sends 36.9 kB over NVSwitch (NVLink 3)" for collectives; "" for ops that
// move nothing over the network. With tensor parallelism it names the group `rank` runs the op in:
// "each of the 2 ranks of its tensor-parallel group (ranks 4-5) sends ...".
std::string transfer_words(const Plan& plan, const Op& op, int rank = 0);
// "ranks 4-5", "ranks 1, 3, 5, 7", "ranks 1, 3, ..., 63 (2 apart)".
std::string group_words(const std::vector<int>& ranks);
// "op 12 of 57 (forward): rank 2 all-gathers layer h.0's parameters: 0.05 MB over the network; each
// rank sends ..."; before the first op, what the GPUs hold when the step starts.
std::string op_caption(const Planned& planned, std::int64_t step, int rank);

}  // namespace zerolens::gui
