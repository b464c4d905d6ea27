#pragma once
// The project's trace (schema "zerolens.trace", traces/README.md): one training step, op by op, per
// recorded rank, with start, duration, bytes, flops and the memory on each device after the op.
// The simulator writes predicted traces; the executor writes measured traces in the same schema so
// the two can be diffed op by op, and the GUI reads either.
#include <array>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sim/plan/plan.hpp"
#include "sim/schedule/memory_replay.hpp"
#include "sim/timeline/timeline.hpp"

namespace zerolens {

inline constexpr int kTraceVersion = 1;

struct TraceOp {
  int rank = 0;
  std::int64_t index = 0;  // position in the rank's schedule
  std::string kind, stream, phase, link;
  std::int32_t micro_step = 0, layer = -1, bucket = -1, group_size = 1;
  std::string layer_name;
  double start = 0, duration = 0;  // seconds
  Bytes bytes = 0;
  double flops = 0;
  std::array<Bytes, kDeviceCount> memory_after{};  // per device (gpu, cpu, nvme), this rank's share
};

// Everything the schedule was planned from, so a reader plans the very same schedule (the GUI
// lines a trace's ops up with its own plan by index). Optional in the file: older and hand-written
// traces lack it and are re-planned from the summary fields of TraceRun.
struct TraceInputs {
  Model model;
  TrainingConfig config;
  Cluster cluster;  // as sized for the run
  ScheduleOptions options;
};

struct TraceRun {
  std::string model, cluster, precision, optimizer_device, param_device;
  Elements parameter_count = 0;
  int dp_size = 1, gpus_per_node = 1, stage = 0;
  std::int64_t micro_batch = 1, seq_len = 1, grad_accumulation = 1;
  std::int64_t target_seq_len = 0;  // an encoder-decoder's target sequence (0: none)
  std::optional<TraceInputs> inputs;
};

struct TraceCollective {
  std::int64_t calls = 0;
  Bytes bytes = 0;  // sum of message sizes (nccl-tests' convention, as `bytes` of an op)
};

struct TraceLinkBytes {
  Bytes pcie_h2d = 0, pcie_d2h = 0, nvme_read = 0, nvme_write = 0;
};

struct TraceSummary {
  double step_time = 0, tokens_per_second = 0, model_flops_per_gpu = 0, mfu = 0, exposed_communication = 0;
  double exposed_offload = 0;              // optional in a trace (0 in those written before it)
  std::array<Bytes, kDeviceCount> peak{};  // per rank
  // Optional; the executor writes them in measured traces (what it counted on the recorded rank),
  // so `zerolens check-measured` can hold a recorded run to the simulator's current figures.
  std::optional<std::array<CategoryBytes, kDeviceCount>> category_highs;  // highest per device and category
  std::optional<std::array<TraceCollective, kOpKindCount>> collectives;   // per op kind, one step (the last)
  // The same over the tensor-parallel group, and between pipeline stages (sends, receives, the
  // tied embedding's all-reduce), in measured traces of runs with those groups.
  std::optional<std::array<TraceCollective, kOpKindCount>> tensor_parallel_collectives;
  std::optional<std::array<TraceCollective, kOpKindCount>> pipeline_collectives;
  // Over hybrid sharding's replicate group and hpZ's secondary group, in measured traces of runs
  // with them (the plan JSON's replicate_collectives and hpz_collectives).
  std::optional<std::array<TraceCollective, kOpKindCount>> replicate_collectives;
  std::optional<std::array<TraceCollective, kOpKindCount>> hpz_collectives;
  // ZeRO++ qgZ's all-to-all hops among a node's ranks and across nodes (measured traces of runs
  // with quantized gradients).
  std::optional<std::array<TraceCollective, kOpKindCount>> node_collectives, cross_node_collectives;
  // Expert parallelism: the EP group's all-to-alls and the expert-data-parallel group's
  // collectives (the plan JSON's expert_parallel_collectives and expert_data_collectives).
  std::optional<std::array<TraceCollective, kOpKindCount>> expert_parallel_collectives,
      expert_data_collectives;
  std::optional<TraceLinkBytes> link_bytes;                               // host-device and NVMe, one step
  // The simulator writes it in predicted traces: allocated, reserved, device used, initialisation.
  std::optional<GpuMemoryFigures> gpu_memory;
};

struct Trace {
  std::string source = "sim";  // "sim" (predicted) or "exec" (measured)
  TraceRun run;
  TraceSummary summary;
  std::vector<int> ranks;
  std::vector<TraceOp> ops;  // grouped by rank, in schedule order
};

// A predicted trace of `ranks` ranks (0..ranks-1; ranks of a data-parallel group are symmetric, so
// every rank replays the representative rank's schedule).
Trace make_trace(const Plan& plan, const Timeline& timeline, int ranks);
// The same with the plan's memory replayed already (ReplayDetail::PerOp or more).
Trace make_trace(const Plan& plan, const Timeline& timeline, const MemoryTimeline& replay,
                 int ranks);
nlohmann::json trace_to_json(const Trace& trace);
// Where one rank of a trace is exposed (exposed_intervals over its ops by stream name: "compute",
// the offload streams "h2d", "d2h", "nvme" and "cpu", every other stream a collective one; a
// pipeline receive is a wait, not work). For a predicted trace their lengths are the summary's
// exposed_communication and exposed_offload.
ExposedIntervals trace_exposed_intervals(const Trace& trace, int rank);
// Throws InputError naming the key when the document is not a valid version-1 trace.
Trace trace_from_json(const nlohmann::json& document);

}  // namespace zerolens
