#pragma once
// Planning the run a trace records again (zerolens check-measured, the GUI's open trace).
#include <optional>

#include "sim/plan/plan.hpp"
#include "sim/trace/trace.hpp"

namespace zerolens {

// What the run was planned from, when the trace records it (run.inputs): planning it gives the
// same schedule, op for op.
std::optional<PlanRequest> recorded_request(const TraceRun& run);
// The same; InputError naming run.inputs when the trace does not record it.
PlanRequest replan_request(const TraceRun& run);

// `config` set to what the run's summary fields record (stage, offload devices, precision, batch,
// sequence length): for traces without inputs (older and hand-written ones), over the settings a
// reader has. Throws InputError naming the field.
TrainingConfig config_for_run(const TraceRun& run, TrainingConfig config);

}  // namespace zerolens
