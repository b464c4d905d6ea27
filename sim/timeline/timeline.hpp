#pragma once
// Timeline simulation: prices every op of a schedule on its stream and runs the streams
// event-driven (an op starts when its stream is free and its dependencies have finished).
//
// Pricing:
//   compute (forward, backward, recompute, GPU optimizer): roofline,
//       max(flops / (peak(precision) x compute_efficiency), bytes touched / (HBM x
//       memory_efficiency))
//   collectives: latency + bytes / bandwidth over the links the ring (or tree) crosses; a group
//   that
//       spans nodes runs hierarchically: intra-node phases on NVLink, the inter-node phase on the
//       network, with nccl-tests' bus-bandwidth factors 2(n-1)/n (all-reduce) and (n-1)/n
//       (reduce-scatter, all-gather, broadcast) applied per level (sim/schedule/comm.hpp)
//   host-device copies: PCIe latency + bytes / PCIe bandwidth of the GPU
//   NVMe reads/writes: bytes / (node NVMe bandwidth / ranks on the node)
//   CPU optimizer: bytes touched / (node CPU memory bandwidth x cpu_efficiency / ranks on the node)
// A cluster calibrated on the CPU backend is priced by sim/timeline/cpu_ranks.hpp instead.
#include <array>
#include <span>
#include <vector>

#include <functional>

#include "sim/hardware/hardware.hpp"
#include "sim/model/model.hpp"
#include "sim/schedule/comm.hpp"
#include "sim/schedule/memory_replay.hpp"
#include "sim/schedule/schedule.hpp"

namespace zerolens {

enum class CollectiveAlgorithm { Ring, Tree, Auto };
const char* to_string(CollectiveAlgorithm algorithm);
CollectiveAlgorithm parse_collective_algorithm(const std::string& text);

// The efficiencies a user may set (CLI flags, Python keywords): a fraction of the peak, above zero.
inline constexpr double kMinEfficiency = 0.001, kMaxEfficiency = 1.0;

struct TimelineOptions {
  double compute_efficiency = 0.5;  // achieved fraction of peak FLOP/s in matrix products
  double memory_efficiency = 0.8;   // achieved fraction of HBM bandwidth
  double cpu_efficiency = 0.5;      // achieved fraction of host memory bandwidth in CPU Adam
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::Auto;  // Auto: the faster of ring and tree
};

struct OpTiming {
  double start = 0;     // seconds from the start of the step
  double duration = 0;  // seconds
  double end() const { return start + duration; }
};

struct MemorySample {
  double time = 0;                          // seconds
  std::array<Bytes, kDeviceCount> bytes{};  // per device, after the op ending at `time`
};

struct Timeline {
  std::vector<OpTiming> ops;  // parallel to Schedule::ops
  double step_time = 0;       // seconds for one optimizer step (all micro-steps)
  std::array<double, kStreamCount> busy{};  // seconds each stream is busy
  // Seconds the collective streams (data, tensor, pipeline parallel) are busy while compute is
  // idle, and the offload streams (PCIe copies, NVMe, the CPU optimizer) apart.
  double exposed_communication = 0;
  double exposed_offload = 0;
  double tokens_per_second = 0;      // whole data-parallel group
  double model_flops_per_gpu = 0;    // FLOP/s per GPU counting 3 x forward (no recompute)
  double hardware_flops_per_gpu = 0; // FLOP/s per GPU including recompute
  double mfu = 0;                    // model_flops_per_gpu / peak
  // Memory over time: the resident memory at 0, then the state after each op (program order) at
  // memory_times' time. Sorted by time.
  std::vector<MemorySample> memory;
};

// When each op's memory state holds on the step's clock: once the op and every op before it in
// program order have ended (the running maximum of the ends). Memory follows program order (the
// host allocates and frees as it issues ops, which is what PyTorch's allocator counts), so an op
// that runs ahead on another stream (ZeRO-3's forward gathers, issued back to back) does not show,
// early, the states of the ops after it: plotting each state at its own op's end did (a 64-GPU
// LLaMA-2 7B ZeRO-3 step showed the end of the forward's memory at 0.2 s of 19 s).
std::vector<double> memory_times(const std::vector<OpTiming>& ops);

// The rates of a step of the schedule that takes `step_time` seconds (all zero when it is not
// positive): tokens of the whole data-parallel group (micro-batch x sequence x accumulation x
// ranks), and per GPU the FLOPs the schedule counts: model FLOPs (forward and backward: 3 x
// forward, no recompute) and hardware FLOPs (recompute included). The timeline's rates and the
// executor's.
struct StepRates {
  double tokens_per_second = 0;
  double model_flops_per_gpu = 0;
  double hardware_flops_per_gpu = 0;
};
StepRates step_rates(const Schedule& schedule, double step_time);

// Seconds one op takes on its stream.
double op_duration(const Op& op, const ScheduleContext& context, const Cluster& cluster,
                   const TimelineOptions& options);
// Seconds of a collective of `message_bytes` over `group_size` ranks (exposed for tests/benchmarks).
double collective_seconds(OpKind kind, Bytes message_bytes, int group_size, const Cluster& cluster,
                          CollectiveAlgorithm algorithm);
// The same over a group of that shape (ranks per node, nodes).
double collective_seconds(OpKind kind, Bytes message_bytes, GroupShape shape,
                          const Cluster& cluster, CollectiveAlgorithm algorithm);

Timeline simulate_timeline(const Schedule& schedule, const Cluster& cluster, const TimelineOptions& options);

// Where the step is exposed: the collective streams, and apart the offload streams (PCIe copies,
// NVMe, the CPU optimizer), busy while compute idles. Sorted, disjoint [start, end) seconds; their
// lengths are Timeline::exposed_communication and exposed_offload.
enum class StreamClass : std::uint8_t { Compute, Communication, Offload };
struct BusyInterval {
  StreamClass stream = StreamClass::Compute;
  double start = 0, end = 0;
};
using Intervals = std::vector<std::pair<double, double>>;
struct ExposedIntervals {
  Intervals communication, offload;
};
ExposedIntervals exposed_intervals(std::vector<BusyInterval> busy);
double total_length(const Intervals& intervals);

// The stages of a pipeline run together (pipeline parallelism): each stage's ops in its program
// order on its streams, and a receive ends when the peer stage's matching send (same phase,
// micro-step and sending chunk) has ended, so the bubbles of the schedule appear as receive waits.
// `replays` are the stages' memory replays (ReplayDetail::PerOp), parallel to `stages`. Every
// stage's timeline has the pipeline's step time (the last stage to finish).
std::vector<Timeline> simulate_pipeline(std::span<const Schedule* const> stages,
                                        const Cluster& cluster, const TimelineOptions& options,
                                        std::span<const MemoryTimeline> replays);
// The same with each stage's model (parallel to `stages`): on a cluster calibrated on the CPU
// backend every stage's ops run in program order on one thread per rank at the calibrated costs
// of its layers (sim/timeline/cpu_ranks.hpp), as simulate_timeline with a model does.
std::vector<Timeline> simulate_pipeline(std::span<const Schedule* const> stages,
                                        std::span<const Model* const> models,
                                        const Cluster& cluster, const TimelineOptions& options,
                                        std::span<const MemoryTimeline> replays);
// The same with the schedule's memory replayed already (ReplayDetail::PerOp or more).
Timeline simulate_timeline(const Schedule& schedule, const Cluster& cluster,
                           const TimelineOptions& options, const MemoryTimeline& replay);
// The same for `model`'s schedule: on a cluster calibrated on the CPU backend
// (ClusterCalibration::cpu_ranks()) every op runs in program order on one thread per rank at the
// calibrated costs (sim/timeline/cpu_ranks.hpp), which price the model's layers; otherwise as
// above.
Timeline simulate_timeline(const Schedule& schedule, const Model& model, const Cluster& cluster,
                           const TimelineOptions& options, const MemoryTimeline& replay);

}  // namespace zerolens
