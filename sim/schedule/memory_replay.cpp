// Replays the schedule's memory effects: the single source of every memory peak.
#include <algorithm>
#include <cmath>

#include "sim/schedule/memory_replay.hpp"

#include "sim/schedule/allocator_replay.hpp"

namespace zerolens {
namespace {

CategoryBytes categories_of(const ComponentBytes& components) {
  CategoryBytes categories{};
  for (int c = 0; c < kComponentCount; ++c) {
    categories[std::size_t(category_of(Component(c)))] += components[std::size_t(c)];
  }
  return categories;
}

Bytes outside_allocator(const ComponentBytes& components) {
  return components[std::size_t(Component::CudaContext)] +
         components[std::size_t(Component::LibraryWorkspace)];
}

// The highest the allocator's bytes on the GPU reach during one initialisation sequence.
Bytes initialization_peak(const std::vector<MemEffect>& effects) {
  Bytes total = 0, peak = 0;
  for (const auto& effect : effects) {
    if (effect.device != Device::Gpu || effect.component == Component::CudaContext ||
        effect.component == Component::LibraryWorkspace) {
      continue;
    }
    total += effect.bytes;
    peak = std::max(peak, total);
  }
  return peak;
}

// The GPU's three figures. Allocated is the replay's peak less what the allocator does not serve;
// reserved comes from the allocator's model (or the flat allowance), never below allocated; what
// it reserves beyond allocated is charged to Fragmentation at the peak, so that the peak is what
// the device holds then.
GpuMemoryFigures gpu_figures(const Schedule& schedule, DevicePeak& gpu) {
  GpuMemoryFigures figures;
  figures.outside_allocator = outside_allocator(gpu.components);
  figures.allocated = gpu.peak - figures.outside_allocator;
  const AllocatorSpec& spec = schedule.allocator;
  if (spec.kind == AllocatorKind::Flat) {
    figures.reserved =
        figures.allocated + Bytes(std::llround(double(std::max<Bytes>(0, figures.allocated)) *
                                               spec.fragmentation_fraction));
  } else {
    const AllocatorReplay allocator = replay_allocator(schedule);
    figures.reserved = std::max(figures.allocated, allocator.peak_reserved);
    figures.allocator_segments = allocator.segments;
    figures.allocator_out_of_memory = allocator.out_of_memory;
  }
  const Bytes beyond = figures.reserved - figures.allocated;
  gpu.components[std::size_t(Component::Fragmentation)] += beyond;
  gpu.peak += beyond;
  figures.device_used = gpu.peak;
  figures.initialization_allocated =
      initialization_peak(schedule.initialization[Schedule::kInitWholeModel]);
  figures.initialization_allocated_partitioned =
      initialization_peak(schedule.initialization[Schedule::kInitPartitioned]);
  return figures;
}

}  // namespace

MemoryTimeline replay_memory(const Schedule& schedule, ReplayDetail detail) {
  const bool per_op = detail != ReplayDetail::Peaks,
             keep_states = detail == ReplayDetail::Components;
  MemoryTimeline timeline;
  std::array<ComponentBytes, kDeviceCount> components{};
  std::array<Bytes, kDeviceCount> totals{};
  for (const auto& effect : schedule.resident) {
    components[std::size_t(effect.device)][std::size_t(effect.component)] += effect.bytes;
    totals[std::size_t(effect.device)] += effect.bytes;
  }
  for (int d = 0; d < kDeviceCount; ++d) {
    auto& device = timeline.devices[std::size_t(d)];
    device.resident = device.peak = totals[std::size_t(d)];
    device.peak_op = -1;
    device.components = components[std::size_t(d)];
  }
  if (per_op) {
    timeline.after_op.reserve(schedule.ops.size());
    timeline.high_during_op.reserve(schedule.ops.size());
  }
  if (keep_states) {
    timeline.states.reserve(schedule.ops.size() + 1);
    timeline.states.push_back(components);
  }
  // Effects apply in the order listed (allocations of an op's outputs come before the frees of
  // its inputs); the high mark of an op is the highest running total reached inside it.
  for (std::size_t i = 0; i < schedule.ops.size(); ++i) {
    std::array<Bytes, kDeviceCount> high = totals;
    for (const auto& effect : schedule.effects_of(schedule.ops[i])) {
      const auto d = std::size_t(effect.device);
      components[d][std::size_t(effect.component)] += effect.bytes;
      totals[d] += effect.bytes;
      if (totals[d] <= high[d]) continue;
      high[d] = totals[d];
      auto& device = timeline.devices[d];
      if (totals[d] > device.peak) {
        device.peak = totals[d];
        device.peak_op = std::int64_t(i);
        device.components = components[d];
      }
    }
    if (per_op) {
      timeline.after_op.push_back(totals);
      timeline.high_during_op.push_back(high);
    }
    if (keep_states) timeline.states.push_back(components);
  }
  timeline.gpu = gpu_figures(schedule, timeline.devices[std::size_t(Device::Gpu)]);
  for (auto& device : timeline.devices) device.categories = categories_of(device.components);
  return timeline;
}

MemoryTimeline replay_memory(const Schedule& schedule, bool record_per_op) {
  return replay_memory(schedule, record_per_op ? ReplayDetail::PerOp : ReplayDetail::Peaks);
}

std::vector<DeviceComponentBytes> replay_memory_components(const Schedule& schedule) {
  return replay_memory(schedule, ReplayDetail::Components).states;
}

std::array<CategoryBytes, kDeviceCount> category_highs(const MemoryTimeline& replay) {
  std::array<CategoryBytes, kDeviceCount> highs{};
  for (const DeviceComponentBytes& state : replay.states) {
    for (int d = 0; d < kDeviceCount; ++d) {
      const CategoryBytes categories = categories_of(state[std::size_t(d)]);
      for (int c = 0; c < kCategoryCount; ++c) {
        Bytes& high = highs[std::size_t(d)][std::size_t(c)];
        high = std::max(high, categories[std::size_t(c)]);
      }
    }
  }
  return highs;
}

std::array<CategoryBytes, kDeviceCount> category_highs(const Schedule& schedule) {
  return category_highs(replay_memory(schedule, ReplayDetail::Components));
}

}  // namespace zerolens
