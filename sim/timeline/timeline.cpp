#include "sim/timeline/timeline.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <tuple>

#include "sim/schedule/comm.hpp"
#include "sim/schedule/memory_replay.hpp"
#include "sim/timeline/cpu_pipeline.hpp"
#include "sim/timeline/cpu_ranks.hpp"

namespace zerolens {
namespace {

bool all_reduce_like(OpKind kind) {
  return kind == OpKind::AllReduce || kind == OpKind::OverflowCheck || kind == OpKind::GradNorm;
}

double ring_seconds(OpKind kind, Bytes message_bytes, GroupShape shape, const Cluster& cluster) {
  const LinkTraffic traffic = collective_traffic(kind, message_bytes, shape);
  const double phases = all_reduce_like(kind) ? 2 : 1;
  const LinkSpec& intra = cluster.node.intra_node;
  const LinkSpec& inter = cluster.inter_node;
  const double latency = phases * ((shape.ranks_per_node - 1) * intra.latency + (shape.nodes - 1) * inter.latency);
  return latency + double(traffic.intra_node) / intra.bandwidth + double(traffic.inter_node) / inter.bandwidth;
}

// NCCL's tree all-reduce: a reduce up and a broadcast down a tree of depth log2(n) per level, at the
// same bandwidth cost as the ring; only its latency term differs.
double tree_seconds(OpKind kind, Bytes message_bytes, GroupShape shape, const Cluster& cluster) {
  const LinkTraffic traffic = collective_traffic(kind, message_bytes, shape);
  const double depth_intra = std::ceil(std::log2(double(shape.ranks_per_node)));
  const double depth_inter = std::ceil(std::log2(double(shape.nodes)));
  const double latency = 2 * (depth_intra * cluster.node.intra_node.latency + depth_inter * cluster.inter_node.latency);
  return latency + double(traffic.intra_node) / cluster.node.intra_node.bandwidth +
         double(traffic.inter_node) / cluster.inter_node.bandwidth;
}

double compute_seconds(const Op& op, const ScheduleContext& context, const Cluster& cluster,
                       const TimelineOptions& options) {
  const double flop_rate = cluster.gpu.peak_flops(context.precision) * options.compute_efficiency;
  const double byte_rate = cluster.gpu.hbm_bandwidth * options.memory_efficiency;
  const double by_flops = flop_rate > 0 ? op.flops / flop_rate : 0;
  const double by_bytes = byte_rate > 0 ? double(op.memory_bytes_touched) / byte_rate : 0;
  return std::max(by_flops, by_bytes);
}

int ranks_on_node(const ScheduleContext& context) {
  return context.ranks_per_node();
}

// The node's drives are shared by its ranks.
double nvme_seconds(Bytes bytes, double node_bandwidth, const char* key, const ScheduleContext& context) {
  if (!(node_bandwidth > 0)) throw InputError(std::string("cluster.node.") + key, "must be positive to simulate NVMe offload");
  return double(bytes) * ranks_on_node(context) / node_bandwidth;
}

// A pipeline send: one message over the link to the peer stage's rank.
double send_seconds(const Op& op, const ScheduleContext& context, const Cluster& cluster) {
  const LinkSpec& link =
      op_group_shape(op, context).nodes > 1 ? cluster.inter_node : cluster.node.intra_node;
  return link.latency + double(op.bytes) / link.bandwidth;
}

// Sorted, merged [start, end) intervals.
Intervals merged(Intervals intervals) {
  std::sort(intervals.begin(), intervals.end());
  Intervals out;
  for (const auto& interval : intervals) {
    if (!out.empty() && interval.first <= out.back().second) {
      out.back().second = std::max(out.back().second, interval.second);
    } else if (interval.second > interval.first) {
      out.push_back(interval);
    }
  }
  return out;
}

// The parts of `a` not covered by `b` (both merged).
Intervals uncovered(const Intervals& a, const Intervals& b) {
  Intervals out;
  std::size_t j = 0;
  for (const auto& [start, end] : a) {
    double cursor = start;
    while (j < b.size() && b[j].second <= cursor) ++j;
    for (std::size_t k = j; k < b.size() && b[k].first < end; ++k) {
      if (b[k].first > cursor) out.emplace_back(cursor, b[k].first);
      cursor = std::max(cursor, b[k].second);
    }
    if (cursor < end) out.emplace_back(cursor, end);
  }
  return out;
}

bool offload_stream(Stream stream) {
  return stream == Stream::H2D || stream == Stream::D2H || stream == Stream::Nvme ||
         stream == Stream::Cpu;
}

// Seconds the collective streams, and apart the offload streams, are busy while compute idles.
std::pair<double, double> exposed_time(const Schedule& schedule,
                                       const std::vector<OpTiming>& timings) {
  std::vector<BusyInterval> busy;
  for (std::size_t i = 0; i < schedule.ops.size(); ++i) {
    // A pipeline receive's time is the wait for its sender (a bubble): the send carries the bytes.
    if (schedule.ops[i].kind == OpKind::Recv) continue;
    const Stream stream = schedule.ops[i].stream;
    const StreamClass kind = stream == Stream::Compute ? StreamClass::Compute
                             : offload_stream(stream)  ? StreamClass::Offload
                                                       : StreamClass::Communication;
    busy.push_back({kind, timings[i].start, timings[i].end()});
  }
  const ExposedIntervals exposed = exposed_intervals(std::move(busy));
  return {total_length(exposed.communication), total_length(exposed.offload)};
}

std::vector<MemorySample> memory_over_time(const Schedule& schedule,
                                           const std::vector<OpTiming>& timings,
                                           const MemoryTimeline& replay) {
  std::vector<MemorySample> samples;
  samples.reserve(schedule.ops.size() + 1);
  std::array<Bytes, kDeviceCount> before{};
  for (const auto& effect : schedule.resident) before[std::size_t(effect.device)] += effect.bytes;
  samples.push_back({0, before});
  const std::vector<double> times = memory_times(timings);
  for (std::size_t i = 0; i < schedule.ops.size(); ++i)
    samples.push_back({times[i], replay.after_op[i]});
  return samples;
}

void fill_rates(Timeline& timeline, const Schedule& schedule, const Cluster& cluster) {
  if (timeline.step_time <= 0) return;
  const StepRates rates = step_rates(schedule, timeline.step_time);
  timeline.tokens_per_second = rates.tokens_per_second;
  timeline.model_flops_per_gpu = rates.model_flops_per_gpu;
  timeline.hardware_flops_per_gpu = rates.hardware_flops_per_gpu;
  const double peak = cluster.gpu.peak_flops(schedule.context.precision);
  timeline.mfu = peak > 0 ? timeline.model_flops_per_gpu / peak : 0;
}

}  // namespace

const char* to_string(CollectiveAlgorithm algorithm) {
  switch (algorithm) {
    case CollectiveAlgorithm::Ring: return "ring";
    case CollectiveAlgorithm::Tree: return "tree";
    case CollectiveAlgorithm::Auto: return "auto";
  }
  return "auto";
}

CollectiveAlgorithm parse_collective_algorithm(const std::string& text) {
  if (text == "ring") return CollectiveAlgorithm::Ring;
  if (text == "tree") return CollectiveAlgorithm::Tree;
  if (text == "auto") return CollectiveAlgorithm::Auto;
  throw InputError("--algorithm", "unknown collective algorithm '" + text + "' (expected ring, tree or auto)");
}

StepRates step_rates(const Schedule& schedule, double step_time) {
  const ScheduleContext& c = schedule.context;
  double model_flops = 0, hardware_flops = 0;
  for (const auto& op : schedule.ops) {
    if (op.kind == OpKind::Forward || op.kind == OpKind::Backward) model_flops += op.flops;
    if (op.kind == OpKind::Forward || op.kind == OpKind::Backward || op.kind == OpKind::Recompute)
      hardware_flops += op.flops;
  }
  if (step_time <= 0) return {};
  const double tokens =
      double(c.micro_batch) * double(c.seq_len) * double(c.grad_accumulation) * double(c.dp_size);
  return {.tokens_per_second = tokens / step_time,
          .model_flops_per_gpu = model_flops / step_time,
          .hardware_flops_per_gpu = hardware_flops / step_time};
}

double collective_seconds(OpKind kind, Bytes message_bytes, int group_size, const Cluster& cluster,
                          CollectiveAlgorithm algorithm) {
  if (group_size <= 1) return 0;
  return collective_seconds(
      kind, message_bytes, group_shape(group_size, cluster.node.gpus_per_node), cluster, algorithm);
}

double collective_seconds(OpKind kind, Bytes message_bytes, GroupShape shape,
                          const Cluster& cluster, CollectiveAlgorithm algorithm) {
  if (shape.ranks_per_node * shape.nodes <= 1) return 0;
  const double ring = ring_seconds(kind, message_bytes, shape, cluster);
  if (!all_reduce_like(kind) || algorithm == CollectiveAlgorithm::Ring) return ring;  // NCCL trees: all-reduce only
  const double tree = tree_seconds(kind, message_bytes, shape, cluster);
  return algorithm == CollectiveAlgorithm::Tree ? tree : std::min(ring, tree);
}

double op_duration(const Op& op, const ScheduleContext& context, const Cluster& cluster, const TimelineOptions& options) {
  switch (op.link) {
    case Link::Network:
      if (op.group_size <= 1 || op.kind == OpKind::Recv) return 0;  // a receive waits for its send
      if (op.kind == OpKind::Send) return send_seconds(op, context, cluster);
      // Every call after the first pays the collective's latency again (its time at 0 bytes).
      return collective_seconds(op.kind, op.bytes, op_group_shape(op, context), cluster,
                                options.algorithm) +
             (op.calls - 1) * collective_seconds(op.kind, 0, op_group_shape(op, context), cluster,
                                                 options.algorithm);
    case Link::PcieH2D:
    case Link::PcieD2H: return cluster.node.pcie.latency + double(op.bytes) / cluster.node.pcie.bandwidth;
    case Link::NvmeRead: return nvme_seconds(op.bytes, cluster.node.nvme_read_bandwidth, "nvme_read_bandwidth", context);
    case Link::NvmeWrite: return nvme_seconds(op.bytes, cluster.node.nvme_write_bandwidth, "nvme_write_bandwidth", context);
    case Link::None: break;
  }
  if (op.stream == Stream::Cpu) {
    const double rate = cluster.node.cpu_memory_bandwidth * options.cpu_efficiency / ranks_on_node(context);
    return double(op.memory_bytes_touched) / rate;
  }
  if (op.stream == Stream::Compute) return compute_seconds(op, context, cluster, options);
  return 0;
}

Timeline simulate_timeline(const Schedule& schedule, const Cluster& cluster, const TimelineOptions& options) {
  return simulate_timeline(schedule, cluster, options,
                           replay_memory(schedule, ReplayDetail::PerOp));
}

namespace {

// The event loop: an op starts when its stream is free and its dependencies have finished; with
// `serial`, also not before the op before it has finished (one thread runs every stream's ops).
Timeline run_ops(const Schedule& schedule, const Cluster& cluster, const MemoryTimeline& replay,
                 bool serial, const std::function<double(const Op&)>& duration_of) {
  cluster.validate("cluster");  // every rate must be positive to price an op
  if (!(cluster.gpu.peak_flops(schedule.context.precision) > 0)) {
    // A GPU without the format (V100 and bf16) cannot run the step; pricing it at zero would be wrong.
    throw InputError("precision", std::string(cluster.gpu.name) + " has no " + to_string(schedule.context.precision) +
                                      " support (its peak FLOP/s for it is 0); choose another precision");
  }
  Timeline timeline;
  timeline.ops.resize(schedule.ops.size());
  std::array<double, kStreamCount> stream_free{};
  double previous_end = 0;
  for (std::size_t i = 0; i < schedule.ops.size(); ++i) {
    const Op& op = schedule.ops[i];
    double start = serial ? previous_end : stream_free[std::size_t(op.stream)];
    for (const auto dep : schedule.deps_of(op)) start = std::max(start, timeline.ops[dep].end());
    const double duration = duration_of(op);
    timeline.ops[i] = {start, duration};
    stream_free[std::size_t(op.stream)] = start + duration;
    previous_end = start + duration;
    timeline.busy[std::size_t(op.stream)] += duration;
    timeline.step_time = std::max(timeline.step_time, start + duration);
  }
  std::tie(timeline.exposed_communication, timeline.exposed_offload) =
      exposed_time(schedule, timeline.ops);
  timeline.memory = memory_over_time(schedule, timeline.ops, replay);
  fill_rates(timeline, schedule, cluster);
  return timeline;
}

}  // namespace

Timeline simulate_timeline(const Schedule& schedule, const Cluster& cluster,
                           const TimelineOptions& options, const MemoryTimeline& replay) {
  return run_ops(schedule, cluster, replay, false,
                 [&](const Op& op) { return op_duration(op, schedule.context, cluster, options); });
}

namespace {

struct TransferKey {
  Phase phase;
  std::int32_t micro, chunk;
  auto operator<=>(const TransferKey&) const = default;
};

TransferKey key_of(const Op& op) {
  return {op.phase, op.micro_step, op.chunk};
}

// One stage's progress through its ops.
struct StageRun {
  std::size_t next = 0;
  std::array<double, kStreamCount> stream_free{};
  std::vector<OpTiming> ops;
  std::map<TransferKey, double> sends;  // end of each send, by what it carries
};

// Places as many of `stage`'s ops as it can (a receive whose send is not placed yet stops it).
bool advance(std::size_t s, std::span<const Schedule* const> stages, std::vector<StageRun>& runs,
             const Cluster& cluster, const TimelineOptions& options) {
  const Schedule& schedule = *stages[s];
  StageRun& run = runs[s];
  bool moved = false;
  while (run.next < schedule.ops.size()) {
    const Op& op = schedule.ops[run.next];
    double start = run.stream_free[std::size_t(op.stream)];
    for (const auto dep : schedule.deps_of(op)) start = std::max(start, run.ops[dep].end());
    double end = start + op_duration(op, schedule.context, cluster, options);
    if (op.kind == OpKind::Recv) {
      if (op.peer_stage < 0 || std::size_t(op.peer_stage) >= runs.size()) {
        throw std::logic_error("pipeline receive from stage " + std::to_string(op.peer_stage) +
                               " of " + std::to_string(runs.size()));
      }
      const auto& sent = runs[std::size_t(op.peer_stage)].sends;
      const auto found = sent.find(key_of(op));
      if (found == sent.end()) break;
      end = std::max(end, found->second);
    }
    run.ops[run.next] = {start, end - start};
    run.stream_free[std::size_t(op.stream)] = end;
    if (op.kind == OpKind::Send) run.sends[key_of(op)] = end;
    ++run.next;
    moved = true;
  }
  return moved;
}

}  // namespace

std::vector<Timeline> simulate_pipeline(std::span<const Schedule* const> stages,
                                        const Cluster& cluster, const TimelineOptions& options,
                                        std::span<const MemoryTimeline> replays) {
  return simulate_pipeline(stages, {}, cluster, options, replays);
}

std::vector<Timeline> simulate_pipeline(std::span<const Schedule* const> stages,
                                        std::span<const Model* const> models,
                                        const Cluster& cluster, const TimelineOptions& options,
                                        std::span<const MemoryTimeline> replays) {
  cluster.validate("cluster");
  std::vector<StageRun> runs(stages.size());
  const bool cpu_ranks = cluster.calibration && cluster.calibration->cpu_ranks() &&
                         models.size() == stages.size();
  if (cpu_ranks) {
    auto timings = simulate_cpu_pipeline(stages, models, cluster);
    for (std::size_t s = 0; s < stages.size(); ++s) {
      runs[s].ops = std::move(timings[s]);
      runs[s].next = runs[s].ops.size();
    }
  } else {
    for (std::size_t s = 0; s < stages.size(); ++s) runs[s].ops.resize(stages[s]->ops.size());
    for (bool moved = true; moved;) {
      moved = false;
      for (std::size_t s = 0; s < stages.size(); ++s)
        moved = advance(s, stages, runs, cluster, options) || moved;
    }
  }
  double step_time = 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    if (runs[s].next < stages[s]->ops.size()) {
      throw std::logic_error("pipeline stage " + std::to_string(s) +
                             " waits for a send no stage makes");
    }
    for (const auto& timing : runs[s].ops) step_time = std::max(step_time, timing.end());
  }
  std::vector<Timeline> timelines(stages.size());
  for (std::size_t s = 0; s < stages.size(); ++s) {
    Timeline& timeline = timelines[s];
    timeline.ops = std::move(runs[s].ops);
    for (std::size_t i = 0; i < timeline.ops.size(); ++i) {
      timeline.busy[std::size_t(stages[s]->ops[i].stream)] += timeline.ops[i].duration;
    }
    timeline.step_time = step_time;
    std::tie(timeline.exposed_communication, timeline.exposed_offload) =
        exposed_time(*stages[s], timeline.ops);
    timeline.memory = memory_over_time(*stages[s], timeline.ops, replays[s]);
  }
  // The rates of the pipeline: its tokens, and per GPU the mean of its stages' FLOPs (a stage's own
  // would credit the one holding the LM head with the others' idle time).
  StepRates rates;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const StepRates stage = step_rates(*stages[s], step_time);
    rates.tokens_per_second = stage.tokens_per_second;
    rates.model_flops_per_gpu += stage.model_flops_per_gpu / double(stages.size());
    rates.hardware_flops_per_gpu += stage.hardware_flops_per_gpu / double(stages.size());
  }
  const double peak =
      stages.empty() ? 0 : cluster.gpu.peak_flops(stages.front()->context.precision);
  for (auto& timeline : timelines) {
    timeline.tokens_per_second = rates.tokens_per_second;
    timeline.model_flops_per_gpu = rates.model_flops_per_gpu;
    timeline.hardware_flops_per_gpu = rates.hardware_flops_per_gpu;
    timeline.mfu = peak > 0 ? rates.model_flops_per_gpu / peak : 0;
  }
  return timelines;
}

Timeline simulate_timeline(const Schedule& schedule, const Model& model, const Cluster& cluster,
                           const TimelineOptions& options, const MemoryTimeline& replay) {
  if (!cluster.calibration || !cluster.calibration->cpu_ranks()) {
    return simulate_timeline(schedule, cluster, options, replay);
  }
  return run_ops(schedule, cluster, replay, true,
                 [&](const Op& op) { return cpu_rank_op_seconds(op, schedule, model, cluster); });
}

ExposedIntervals exposed_intervals(std::vector<BusyInterval> busy) {
  Intervals compute, communication, offload;
  for (const auto& interval : busy) {
    (interval.stream == StreamClass::Compute   ? compute
     : interval.stream == StreamClass::Offload ? offload
                                               : communication)
        .emplace_back(interval.start, interval.end);
  }
  const Intervals computing = merged(std::move(compute));
  return {uncovered(merged(std::move(communication)), computing),
          uncovered(merged(std::move(offload)), computing)};
}

double total_length(const Intervals& intervals) {
  double total = 0;
  for (const auto& [start, end] : intervals) total += end - start;
  return total;
}

std::vector<double> memory_times(const std::vector<OpTiming>& ops) {
  std::vector<double> times;
  times.reserve(ops.size());
  double settled = 0;
  for (const auto& op : ops) {
    settled = std::max(settled, op.end());
    times.push_back(settled);
  }
  return times;
}

}  // namespace zerolens
