#pragma once
// Whose bytes a component holds, as the walkthrough draws them (sim's sharing_of): a rank's
// partition belongs to it; a full copy holds every rank's share; activations and overhead belong
// to no one.
#include <vector>

#include "sim/schedule/schedule.hpp"

namespace zerolens::gui {

inline constexpr int kNoOwner = -1;
inline constexpr int kOtherRanks = -2;  // ranks beyond those drawn

struct Slice {
  int owner = kNoOwner;
  Bytes bytes = 0;
};

// The slices a block of `bytes` on `rank` is drawn in. Replicated: one equal share per rank (the
// last takes the remainder, so the slices sum to `bytes`); with more than `max_owners` ranks the
// rank's own share and one slice for all the others.
std::vector<Slice> slices_of(Component component, Bytes bytes, int rank, int dp_size,
                             int max_owners);

}  // namespace zerolens::gui
