#pragma once
// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp), run over the
// schedule's allocations and frees to predict what torch.cuda.max_memory_reserved() reports and
// how much of it is fragmentation. The rules it follows, each from that file:
// - requests are rounded up to a multiple of 512 bytes (round_size, kMinBlockSize);
// - requests of at most 1 MiB (kSmallSize) are served from the small pool, whose segments are
//   2 MiB (kSmallBuffer); larger ones from the large pool, whose segments are 20 MiB (kLargeBuffer)
//   for requests under 10 MiB (kMinLargeAlloc) and the request rounded up to 2 MiB (kRoundLarge)
//   above (get_allocation_size);
// - a request takes the smallest free cached block of its pool that is large enough (best fit,
//   get_free_block), and the block is split when what remains is at least 512 bytes (small pool)
//   or more than 1 MiB (large pool) (should_split);
// - a freed block merges with free neighbours of its segment (free_block, try_merge_blocks);
// - when a new segment would exceed the device, every cached segment with no block in use is
//   returned (release_cached_blocks) and the request is tried once more; failing that, the
//   allocation is out of memory.
// With expandable_segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) each pool is one
// segment that grows by mapping 2 MiB pages (20 MiB in the large pool) at its end, so a request
// that no free block fits extends the segment by what it lacks beyond the free block at the end.
// - blocks belong to the stream that allocated them: a free block is handed out again only to a
//   request on the same stream (get_free_block matches the stream), so buffers that collectives
//   allocate on their own streams do not reuse what the compute stream freed, and the reverse.
// Left out: cross-stream uses (record_stream), max_split_size_mb and roundup_power2_divisions
// (off by default), garbage_collection_threshold, and the allocation of CUDA graphs' private pools.
#include <cstdint>
#include <map>
#include <set>
#include <vector>

namespace zerolens {

struct CachingAllocatorOptions {
  std::int64_t device_limit = 0;  // bytes the allocator may reserve (0: unlimited)
  bool expandable_segments = false;
};

struct CachingAllocatorStats {
  std::int64_t allocated = 0, reserved = 0;            // now (allocated counts rounded sizes)
  std::int64_t peak_allocated = 0, peak_reserved = 0;  // highest so far
  std::int64_t segments_allocated = 0;                 // cudaMalloc calls (or page mappings)
  std::int64_t cache_flushes = 0;                      // release_cached_blocks on a full device
  bool out_of_memory = false;                          // some request could not be served
};

class CachingAllocatorModel {
 public:
  using BlockId = std::int64_t;
  static constexpr std::int64_t kMinBlockSize = 512;
  static constexpr std::int64_t kSmallSize = std::int64_t{1} << 20;
  static constexpr std::int64_t kSmallBuffer = std::int64_t{2} << 20;
  static constexpr std::int64_t kMinLargeAlloc = std::int64_t{10} << 20;
  static constexpr std::int64_t kLargeBuffer = std::int64_t{20} << 20;
  static constexpr std::int64_t kRoundLarge = std::int64_t{2} << 20;

  explicit CachingAllocatorModel(CachingAllocatorOptions options = {}) : options_(options) {}

  static std::int64_t round_size(std::int64_t bytes);
  static std::int64_t segment_size(std::int64_t rounded);

  // Allocates `bytes` (> 0) on `stream` and returns the block's id, for free().
  BlockId allocate(std::int64_t bytes, int stream = 0);
  void free(BlockId block);
  // Returns every segment with no block in use to the device (torch.cuda.empty_cache()).
  void release_cached_segments();
  void reset_peaks();  // torch.cuda.reset_peak_memory_stats()
  const CachingAllocatorStats& stats() const { return stats_; }

 private:
  struct Block {
    std::int64_t segment = 0, offset = 0, size = 0;
    bool small = false, in_use = false;
    int stream = 0;
  };
  struct Segment {
    std::int64_t size = 0;
    bool small = false;
    int stream = 0;
    std::map<std::int64_t, BlockId> blocks;  // offset -> block, covering the segment
  };
  using FreeKey = std::pair<std::int64_t, BlockId>;  // size, block (best fit, then oldest)

  // The free blocks of one pool (small or large) of one stream.
  std::set<FreeKey>& pool(bool small, int stream) { return pools_[{stream, small}]; }
  std::set<FreeKey>& pool_of(const Block& block) { return pool(block.small, block.stream); }
  BlockId take_free_block(std::int64_t rounded, bool small, int stream);
  BlockId new_segment(std::int64_t rounded, bool small, int stream);
  BlockId grow_expandable(std::int64_t rounded, bool small, int stream);
  BlockId make_block(std::int64_t segment, std::int64_t offset, std::int64_t size);
  BlockId split(BlockId block, std::int64_t rounded);
  void mark_free(BlockId block);
  void merge_with_neighbour(BlockId& block, bool next);
  bool fits_on_device(std::int64_t more) const;
  void note_in_use(BlockId block);

  CachingAllocatorOptions options_;
  CachingAllocatorStats stats_;
  std::vector<Block> blocks_;
  std::map<std::int64_t, Segment> segments_;
  std::int64_t next_segment_ = 0;
  std::map<std::pair<int, bool>, std::set<FreeKey>> pools_;  // (stream, small) -> free blocks
  std::map<std::pair<int, bool>, std::int64_t> expandable_segment_;  // (stream, small) -> segment
};

}  // namespace zerolens
