#pragma once
// The CPU backend's own costs for `zerolens calibrate` (docs/calibrate.md, "The CPU backend's own
// costs"): what the simulator prices the backend's step with (sim/timeline/cpu_ranks.hpp). Here,
// above the model and the engine it times; exec::calibrate takes it as its CpuBackendCosts.
#include "exec/calibrate/calibrate.hpp"

namespace zerolens::exec {

// Collectives over every group of 2 .. comm.size() first ranks (the others idle, asleep), the
// executor's GPT-2 layers over options.layer_shapes fitted per layer kind and direction, and the
// engine's own work per op kind over reference plans on one rank, into `result`; every rank gets
// rank 0's figures. Collective.
void measure_cpu_backend(Communicator& comm, const CalibrateOptions& options, Calibration& result);

}  // namespace zerolens::exec
