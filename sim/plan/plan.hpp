#pragma once
// A plan: model + training config + cluster -> schedule -> memory per device and traffic per link.
#include <array>
#include <string>
#include <vector>

#include "sim/config/config.hpp"
#include "sim/hardware/hardware.hpp"
#include "sim/model/model.hpp"
#include "sim/schedule/comm.hpp"
#include "sim/schedule/memory_replay.hpp"
#include "sim/schedule/schedule.hpp"

namespace zerolens {

struct PlanRequest {
  Model model;
  TrainingConfig config;
  Cluster cluster;  // already sized with with_ranks()
  int dp_size = 1;
  ScheduleOptions options;
};

struct DeviceReport {
  Device device = Device::Gpu;
  // GPU figures are per rank; CPU and NVMe are per node (the node's ranks share them).
  int ranks_sharing = 1;
  Bytes capacity = 0;
  Bytes peak = 0;                 // per rank (GPU) or per node (CPU, NVMe)
  Bytes peak_per_rank = 0;
  CategoryBytes categories{};     // at the peak, same scope as `peak`
  ComponentBytes components{};    // at the peak, same scope as `peak`
  std::int64_t peak_op = -1;
  bool allocator_out_of_memory = false;  // GPU: the allocator's model ran out of device memory
  bool placement_failed = false;  // GPU: ColossalAI's Gemini cannot place the shards (a note says)
  Bytes headroom() const { return capacity - peak; }
  bool fits() const { return peak <= capacity && !allocator_out_of_memory && !placement_failed; }
};

// One pipeline stage of a plan: what its rank holds and its step.
struct PipelineStagePlan {
  Model model;
  Schedule schedule;
  Bytes gpu_allocated = 0;    // the stage's peak allocated bytes (max_memory_allocated)
  Bytes gpu_device_used = 0;  // what nvidia-smi would show on the stage's GPU (decides fits)
};

struct Plan {
  PlanRequest request;
  // What one rank holds of request.model: the model itself, or its tensor-parallel shard
  // (config.tensor_parallel), or with pipeline parallelism the stage planned below. The schedule's
  // layers, FLOPs and tensors are this model's.
  Model rank_model;
  // Pipeline parallelism: every stage, in order; `schedule` and `rank_model` are those of the stage
  // that uses the most GPU memory (device used, then allocated: the one that decides whether the
  // job fits), `pipeline_stage` its index. Empty without pipeline parallelism.
  std::vector<PipelineStagePlan> pipeline_stages;
  int pipeline_stage = 0;
  ResolvedBatch batch;
  std::int64_t seq_len = 0;
  Schedule schedule;
  std::array<DeviceReport, kDeviceCount> devices;
  GpuMemoryFigures gpu;  // per rank: allocated, reserved, device used, initialisation
  CommReport comm;
  std::vector<std::string> notes;  // facts worth telling the user (ignored options, assumptions)

  const DeviceReport& device(Device d) const { return devices[std::size_t(d)]; }
  bool fits() const;
};

// Validates, resolves the batch, builds the schedule and derives the reports. Throws InputError.
Plan make_plan(PlanRequest request);
// The same, keeping the replay of the schedule's memory the reports come from, at `detail`
// (predict() replays once for the plan, the timeline and the trace).
Plan make_plan(PlanRequest request, ReplayDetail detail, MemoryTimeline& replay);

}  // namespace zerolens
