#include "sim/schedule/allocator_replay.hpp"

#include <array>
#include <vector>

#include "sim/schedule/caching_allocator.hpp"

namespace zerolens {
namespace {

bool served_by_allocator(const MemEffect& effect) {
  return effect.device == Device::Gpu && effect.component != Component::CudaContext &&
         effect.component != Component::LibraryWorkspace &&
         effect.component != Component::Fragmentation;
}

struct Live {
  CachingAllocatorModel::BlockId block;
  Bytes bytes;
  int stream;
};

class Replayer {
 public:
  explicit Replayer(const AllocatorSpec& spec)
      : allocator_({.device_limit = spec.device_limit,
                    .expandable_segments = spec.kind == AllocatorKind::PytorchExpandable}) {}

  // `stream`: the stream of the op whose effect it is (the pool its allocation comes from).
  void apply(const MemEffect& effect, int stream) {
    if (!served_by_allocator(effect)) return;
    auto& live = live_[std::size_t(effect.component)];
    if (effect.bytes > 0) {
      live.push_back({allocator_.allocate(effect.bytes, stream), effect.bytes, stream});
      return;
    }
    free_bytes(live, -effect.bytes);
  }

  CachingAllocatorModel& allocator() { return allocator_; }

 private:
  void free_bytes(std::vector<Live>& live, Bytes bytes) {
    for (auto it = live.rbegin(); it != live.rend(); ++it) {
      if (it->bytes != bytes) continue;
      allocator_.free(it->block);
      live.erase(std::next(it).base());
      return;
    }
    while (bytes > 0 && !live.empty()) {
      const Live last = live.back();
      live.pop_back();
      allocator_.free(last.block);
      if (last.bytes > bytes) {  // a part stays in use: its own allocation from now on
        live.push_back({allocator_.allocate(last.bytes - bytes, last.stream), last.bytes - bytes,
                        last.stream});
        return;
      }
      bytes -= last.bytes;
    }
  }

  CachingAllocatorModel allocator_;
  std::array<std::vector<Live>, kComponentCount> live_;
};

}  // namespace

AllocatorReplay replay_allocator(const Schedule& schedule) {
  Replayer replayer(schedule.allocator);
  const int compute = int(Stream::Compute);
  for (const auto& effect : schedule.resident) replayer.apply(effect, compute);
  for (int step = 0; step < 2; ++step) {
    if (step == 1) replayer.allocator().reset_peaks();
    for (const Op& op : schedule.ops) {
      // Only collectives allocate on a stream of their own; the copies' staging is allocated on
      // the compute stream.
      const int stream = op.stream == Stream::Collective ? int(Stream::Collective) : compute;
      for (const auto& effect : schedule.effects_of(op)) replayer.apply(effect, stream);
    }
  }
  const auto& stats = replayer.allocator().stats();
  return {.peak_allocated = stats.peak_allocated,
          .peak_reserved = stats.peak_reserved,
          .segments = stats.segments_allocated,
          .out_of_memory = stats.out_of_memory};
}

}  // namespace zerolens
