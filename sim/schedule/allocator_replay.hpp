#pragma once
// The GPU's allocations and frees of a step, replayed through a model of the allocator the
// framework uses (PyTorch's caching allocator), to predict what it reserves from the device.
#include <cstdint>

#include "sim/core/units.hpp"
#include "sim/schedule/schedule.hpp"

namespace zerolens {

struct AllocatorReplay {
  Bytes peak_allocated = 0;  // as the allocator counts it (sizes rounded to 512 bytes)
  Bytes peak_reserved = 0;   // highest reserved, in the steady state (the second step)
  std::int64_t segments = 0;
  bool out_of_memory = false;
};

// Each positive GPU effect of the schedule (beyond the CUDA context and library workspaces, which
// the allocator does not serve) is one allocation; a negative effect frees the component's live
// allocation of that size, most recent first, or else the most recent ones until its bytes are
// covered (the builder sums some tensors into one effect). The resident allocations are made
// once, on the compute stream, and each op's on its stream (collectives allocate on theirs, whose
// blocks the compute stream does not reuse); the step runs twice and the figures are the second
// step's: the first only fills the cache (PyTorch's reserved memory grows during the first steps
// and then stays).
AllocatorReplay replay_allocator(const Schedule& schedule);

}  // namespace zerolens
