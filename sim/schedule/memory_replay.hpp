#pragma once
// The memory of a step, replayed from the schedule's effects: the single source of every memory
// figure (peaks, the memory after each op, the memory by component at every moment).
#include <array>
#include <cstdint>
#include <vector>

#include "sim/core/units.hpp"
#include "sim/schedule/schedule.hpp"

namespace zerolens {

// Running memory: per device and category, before the step and after each op; and the peak.
using CategoryBytes = std::array<Bytes, kCategoryCount>;
using ComponentBytes = std::array<Bytes, kComponentCount>;

struct DevicePeak {
  // Highest total reached during the step; on the GPU, what the device holds at that moment:
  // allocated, what the allocator reserves beyond it (Fragmentation) and the memory outside the
  // allocator (CUDA context, library workspaces), i.e. GpuMemoryFigures::device_used.
  Bytes peak = 0;
  std::int64_t peak_op = -1;    // op during which it was reached (-1: at initialisation)
  CategoryBytes categories{};   // breakdown at the peak
  ComponentBytes components{};  // finer breakdown at the peak
  Bytes resident = 0;           // allocated before the step
};

// The three figures a user sees for one GPU, and the initialisation's peak.
struct GpuMemoryFigures {
  Bytes allocated = 0;  // peak of the tensors' bytes: torch.cuda.max_memory_allocated()
  Bytes reserved = 0;  // peak the allocator holds from the device: torch.cuda.max_memory_reserved()
  Bytes outside_allocator = 0;  // CUDA context and library workspaces (not the allocator's)
  Bytes device_used = 0;        // reserved + outside_allocator: what nvidia-smi shows; decides fits
  // Peak allocated while the model is built and partitioned: moved to the GPU whole first, and
  // built partitioned (zero.Init, meta device); the same below stage 3.
  Bytes initialization_allocated = 0, initialization_allocated_partitioned = 0;
  std::int64_t allocator_segments = 0;   // segments the allocator reserved (cudaMalloc calls)
  bool allocator_out_of_memory = false;  // the allocator could not serve a request within the GPU
};

using DeviceComponentBytes = std::array<ComponentBytes, kDeviceCount>;

// How much of the step a replay keeps besides the peaks.
enum class ReplayDetail {
  Peaks,       // the peaks only (a plan)
  PerOp,       // and the totals after (and highest inside) every op (timeline, trace)
  Components,  // and the memory by component at every moment (the GUI's views, validation)
};

struct MemoryTimeline {
  std::array<DevicePeak, kDeviceCount> devices;
  GpuMemoryFigures gpu;
  // Per op, the total bytes on each device after the op (and the transient high inside it).
  std::vector<std::array<Bytes, kDeviceCount>> after_op;
  std::vector<std::array<Bytes, kDeviceCount>> high_during_op;
  // Memory by device and component at every moment of the step: entry 0 before the first op (the
  // resident memory), entry i + 1 after op i; for views that draw one moment. What the allocator
  // reserves beyond the allocated bytes belongs to the peak and is not included.
  std::vector<DeviceComponentBytes> states;
};

// Replays the schedule's memory effects, keeping `detail`: the single source of every memory
// figure of a step.
MemoryTimeline replay_memory(const Schedule& schedule, ReplayDetail detail);
// With `record_per_op` false only the peaks are kept (ReplayDetail::Peaks), else PerOp.
MemoryTimeline replay_memory(const Schedule& schedule, bool record_per_op);

// replay_memory(schedule, ReplayDetail::Components).states.
std::vector<DeviceComponentBytes> replay_memory_components(const Schedule& schedule);
// The highest each category reaches during the step (resident included), per device and rank; the
// categories need not peak together. What an executor's ledger high-water marks are compared with.
// From a replay with ReplayDetail::Components, or replaying the schedule.
std::array<CategoryBytes, kDeviceCount> category_highs(const MemoryTimeline& replay);
std::array<CategoryBytes, kDeviceCount> category_highs(const Schedule& schedule);

}  // namespace zerolens
