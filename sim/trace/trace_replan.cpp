#include "sim/trace/trace_replan.hpp"

#include "sim/config/overrides.hpp"

namespace zerolens {

std::optional<PlanRequest> recorded_request(const TraceRun& run) {
  if (!run.inputs) return std::nullopt;
  const TraceInputs& in = *run.inputs;
  return PlanRequest{.model = in.model,
                     .config = in.config,
                     .cluster = in.cluster,
                     .dp_size = run.dp_size,
                     .options = in.options};
}

PlanRequest replan_request(const TraceRun& run) {
  std::optional<PlanRequest> request = recorded_request(run);
  if (!request) {
    throw InputError("run.inputs",
                     "missing: the check re-plans from what the run was planned from "
                     "(measured traces written by `zerolens validate --measured-trace` carry it)");
  }
  return std::move(*request);
}

TrainingConfig config_for_run(const TraceRun& run, TrainingConfig config) {
  const Precision precision = parse_precision(run.precision, "run.precision");
  const OffloadDevice optimizer =
      parse_offload_device(run.optimizer_device, "run.optimizer_device");
  const OffloadDevice param = parse_offload_device(run.param_device, "run.param_device");
  // As recorded, not settled: a stage given with its offloads keeps them.
  Diagnostics diagnostics;
  apply_overrides(config,
                  {.stage = run.stage,
                   .offload_optimizer = optimizer,
                   .offload_param = param,
                   .precision = precision},
                  diagnostics, std::nullopt, OverridePolicy::Interactive);
  config.batch = BatchConfig{.micro_batch_per_gpu = run.micro_batch,
                             .gradient_accumulation_steps = run.grad_accumulation};
  config.seq_len = run.seq_len;
  if (run.target_seq_len > 0) config.target_seq_len = run.target_seq_len;
  return config;
}

}  // namespace zerolens
