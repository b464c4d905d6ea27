// PyTorch's CUDA caching allocator, modelled: see caching_allocator.hpp for the rules and where
// each comes from.
#include "sim/schedule/caching_allocator.hpp"

#include <algorithm>
#include <stdexcept>

namespace zerolens {

std::int64_t CachingAllocatorModel::round_size(std::int64_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return (bytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

std::int64_t CachingAllocatorModel::segment_size(std::int64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

CachingAllocatorModel::BlockId CachingAllocatorModel::allocate(std::int64_t bytes, int stream) {
  if (bytes <= 0) throw std::invalid_argument("CachingAllocatorModel::allocate: bytes must be > 0");
  const std::int64_t rounded = round_size(bytes);
  const bool small = rounded <= kSmallSize;
  BlockId block = take_free_block(rounded, small, stream);
  if (block < 0) {
    block = options_.expandable_segments ? grow_expandable(rounded, small, stream)
                                         : new_segment(rounded, small, stream);
  }
  block = split(block, rounded);
  note_in_use(block);
  return block;
}

// Best fit within the stream's pool: the smallest free block at least `rounded` bytes.
CachingAllocatorModel::BlockId CachingAllocatorModel::take_free_block(std::int64_t rounded,
                                                                      bool small, int stream) {
  auto& free_blocks = pool(small, stream);
  const auto found = free_blocks.lower_bound({rounded, -1});
  if (found == free_blocks.end()) return -1;
  const BlockId block = found->second;
  free_blocks.erase(found);
  return block;
}

bool CachingAllocatorModel::fits_on_device(std::int64_t more) const {
  return options_.device_limit <= 0 || stats_.reserved + more <= options_.device_limit;
}

CachingAllocatorModel::BlockId CachingAllocatorModel::new_segment(std::int64_t rounded, bool small,
                                                                  int stream) {
  const std::int64_t size = segment_size(rounded);
  if (!fits_on_device(size)) {
    release_cached_segments();
    ++stats_.cache_flushes;
    if (!fits_on_device(size)) stats_.out_of_memory = true;  // served anyway, to keep counting
  }
  const std::int64_t id = next_segment_++;
  segments_[id] = Segment{.size = size, .small = small, .stream = stream, .blocks = {}};
  ++stats_.segments_allocated;
  stats_.reserved += size;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  return make_block(id, 0, size);
}

// One segment per pool and stream that grows at its end by whole pages: the free block at the end
// (if any) is extended to the request.
CachingAllocatorModel::BlockId CachingAllocatorModel::grow_expandable(std::int64_t rounded,
                                                                      bool small, int stream) {
  const auto key = std::pair(stream, small);
  if (!expandable_segment_.contains(key)) {
    expandable_segment_[key] = next_segment_;
    segments_[next_segment_] = Segment{.size = 0, .small = small, .stream = stream, .blocks = {}};
    ++next_segment_;
  }
  const std::int64_t id = expandable_segment_.at(key);
  const std::int64_t page = small ? kSmallBuffer : kLargeBuffer;
  Segment& segment = segments_.at(id);
  BlockId tail = -1;
  std::int64_t have = 0;
  if (!segment.blocks.empty()) {
    const BlockId last = std::prev(segment.blocks.end())->second;
    if (!blocks_[std::size_t(last)].in_use) {
      tail = last;
      have = blocks_[std::size_t(last)].size;
      pool(small, stream).erase({have, last});
    }
  }
  const std::int64_t grow = (rounded - have + page - 1) / page * page;
  if (!fits_on_device(grow)) stats_.out_of_memory = true;
  segment.size += grow;
  ++stats_.segments_allocated;
  stats_.reserved += grow;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  if (tail >= 0) {
    blocks_[std::size_t(tail)].size += grow;
    return tail;
  }
  return make_block(id, segment.size - grow, grow);
}

CachingAllocatorModel::BlockId CachingAllocatorModel::make_block(std::int64_t segment,
                                                                 std::int64_t offset,
                                                                 std::int64_t size) {
  const BlockId id = BlockId(blocks_.size());
  const Segment& owner = segments_.at(segment);
  blocks_.push_back(Block{.segment = segment,
                          .offset = offset,
                          .size = size,
                          .small = owner.small,
                          .in_use = false,
                          .stream = owner.stream});
  segments_.at(segment).blocks[offset] = id;
  return id;
}

// Splits off what the request leaves, when the pool's rule allows, and caches it.
CachingAllocatorModel::BlockId CachingAllocatorModel::split(BlockId id, std::int64_t rounded) {
  Block& block = blocks_[std::size_t(id)];
  const std::int64_t remaining = block.size - rounded;
  const bool should_split = block.small ? remaining >= kMinBlockSize : remaining > kSmallSize;
  if (!should_split) return id;
  const std::int64_t segment = block.segment, offset = block.offset + rounded;
  block.size = rounded;
  const BlockId rest = make_block(segment, offset, remaining);
  pool_of(blocks_[std::size_t(rest)]).insert({remaining, rest});
  return id;
}

void CachingAllocatorModel::note_in_use(BlockId id) {
  Block& block = blocks_[std::size_t(id)];
  block.in_use = true;
  stats_.allocated += block.size;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
}

void CachingAllocatorModel::free(BlockId id) {
  if (id < 0 || std::size_t(id) >= blocks_.size() || !blocks_[std::size_t(id)].in_use) {
    throw std::invalid_argument("CachingAllocatorModel::free: not a block in use");
  }
  stats_.allocated -= blocks_[std::size_t(id)].size;
  mark_free(id);
}

void CachingAllocatorModel::mark_free(BlockId id) {
  blocks_[std::size_t(id)].in_use = false;
  merge_with_neighbour(id, false);
  merge_with_neighbour(id, true);
  const Block& block = blocks_[std::size_t(id)];
  pool_of(block).insert({block.size, id});
}

// Merges the free block `id` with its free neighbour before (next = false) or after it; `id`
// becomes the merged block.
void CachingAllocatorModel::merge_with_neighbour(BlockId& id, bool next) {
  Block& block = blocks_[std::size_t(id)];
  Segment& segment = segments_.at(block.segment);
  auto at = segment.blocks.find(block.offset);
  if (next) {
    ++at;
    if (at == segment.blocks.end()) return;
  } else {
    if (at == segment.blocks.begin()) return;
    --at;
  }
  const BlockId other = at->second;
  Block& neighbour = blocks_[std::size_t(other)];
  if (neighbour.in_use) return;
  pool_of(neighbour).erase({neighbour.size, other});
  if (next) {
    block.size += neighbour.size;
    segment.blocks.erase(at);
  } else {
    neighbour.size += block.size;
    segment.blocks.erase(block.offset);
    id = other;
  }
}

void CachingAllocatorModel::release_cached_segments() {
  for (auto it = segments_.begin(); it != segments_.end();) {
    const Segment& segment = it->second;
    const bool unused =
        segment.blocks.size() == 1 && !blocks_[std::size_t(segment.blocks.begin()->second)].in_use;
    if (!unused) {
      ++it;
      continue;
    }
    const BlockId only = segment.blocks.begin()->second;
    pool(segment.small, segment.stream).erase({blocks_[std::size_t(only)].size, only});
    stats_.reserved -= segment.size;
    const std::int64_t id = it->first;
    std::erase_if(expandable_segment_, [id](const auto& entry) { return entry.second == id; });
    it = segments_.erase(it);
  }
}

void CachingAllocatorModel::reset_peaks() {
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

}  // namespace zerolens
