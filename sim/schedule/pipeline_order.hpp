#pragma once
// The order in which one pipeline stage runs its micro-batches' forwards and backwards.
#include <cstdint>
#include <vector>

#include "sim/config/parallelism.hpp"

namespace zerolens {

struct PipelineUnit {
  bool forward = true;
  std::int32_t micro = 0;  // micro-batch
  std::int32_t chunk = 0;  // the stage's model chunk (0 .. virtual_stages - 1)
};

// Stage `stage`'s units for `micro_batches` micro-batches:
//   - GPipe: every forward, then every backward;
//   - 1F1B (PipeDream-Flush; DeepSpeed's TrainSchedule, Megatron's
//     forward_backward_pipelining_without_interleaving): min(size - stage - 1, m) forwards, then a
//     forward and a backward in turn, then the remaining backwards;
//   - interleaved 1F1B (Megatron's forward_backward_pipelining_with_interleaving): over m x v
//     chunk-units, (size - stage - 1) x 2 + (v - 1) x size warm-up forwards (all of them when
//     m == size), then one forward and one backward in turn; unit k runs micro-batch
//     (k / (size v)) size + k mod size on chunk (k mod (size v)) / size, backwards on the chunks in
//     reverse. Needs m divisible by size (Megatron asserts it).
// Throws InputError for an interleaved schedule whose micro-batches do not divide.
std::vector<PipelineUnit> pipeline_order(const PipelineParallelism& pipeline, int stage,
                                         std::int64_t micro_batches);

}  // namespace zerolens
