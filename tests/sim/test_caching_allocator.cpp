// The caching allocator model against sequences worked by hand from the rules of PyTorch's
// CUDACachingAllocator.cpp (round_size, get_allocation_size, get_free_block, should_split,
// free_block, release_cached_blocks).
#include <gtest/gtest.h>

#include "sim/schedule/caching_allocator.hpp"

namespace zerolens {
namespace {

constexpr std::int64_t MiB = std::int64_t{1} << 20;

TEST(CachingAllocator, SmallRequestsShareATwoMiBSegment) {
  CachingAllocatorModel allocator;
  allocator.allocate(100);  // rounded to 512
  allocator.allocate(MiB);  // the largest small request
  EXPECT_EQ(allocator.stats().allocated, 512 + MiB);
  EXPECT_EQ(allocator.stats().reserved, 2 * MiB);
  EXPECT_EQ(allocator.stats().segments_allocated, 1);
}

TEST(CachingAllocator, MediumRequestsTakeTwentyMiBSegmentsAndLargeOnesRoundToTwoMiB) {
  CachingAllocatorModel allocator;
  allocator.allocate(MiB + MiB / 2);
  allocator.allocate(MiB + MiB / 2);  // split from the same 20 MiB segment
  EXPECT_EQ(allocator.stats().reserved, 20 * MiB);
  allocator.allocate(12 * MiB + 1);  // 12 MiB + 512, from the 17 MiB the segment has left
  EXPECT_EQ(allocator.stats().reserved, 20 * MiB);
  allocator.allocate(12 * MiB + 1);  // 5 MiB - 512 are left: a new segment, 12 MiB + 512 -> 14 MiB
  EXPECT_EQ(allocator.stats().reserved, 34 * MiB);
  EXPECT_EQ(allocator.stats().allocated, 3 * MiB + 24 * MiB + 1024);
}

TEST(CachingAllocator, AFreedBlockTooSmallForTheNextRequestIsFragmentation) {
  CachingAllocatorModel allocator;
  const auto a = allocator.allocate(100 * MiB);
  allocator.allocate(100 * MiB);
  allocator.free(a);
  allocator.allocate(150 * MiB);
  EXPECT_EQ(allocator.stats().allocated, 250 * MiB);
  EXPECT_EQ(allocator.stats().reserved, 350 * MiB);
  EXPECT_EQ(allocator.stats().peak_allocated, 250 * MiB);
  // A request the freed block fits is served from it, split (the rest is over 1 MiB).
  allocator.allocate(60 * MiB);
  allocator.allocate(30 * MiB);
  EXPECT_EQ(allocator.stats().reserved, 350 * MiB);
  // A remainder of at most 1 MiB is not split off: the request takes the whole 10 MiB left.
  allocator.allocate(9 * MiB + MiB / 2);
  EXPECT_EQ(allocator.stats().allocated, 250 * MiB + 90 * MiB + 10 * MiB);
  EXPECT_EQ(allocator.stats().reserved, 350 * MiB);
}

TEST(CachingAllocator, FreedNeighboursMergeIntoOneBlock) {
  CachingAllocatorModel allocator;
  const auto a = allocator.allocate(2 * MiB);
  const auto b = allocator.allocate(2 * MiB);
  allocator.free(a);
  allocator.free(b);
  allocator.allocate(19 * MiB);  // fits only in the merged 20 MiB block
  EXPECT_EQ(allocator.stats().reserved, 20 * MiB);
  EXPECT_EQ(allocator.stats().segments_allocated, 1);
}

TEST(CachingAllocator, BestFitPrefersTheSmallestBlockThatFits) {
  CachingAllocatorModel allocator;
  const auto big = allocator.allocate(80 * MiB);
  allocator.allocate(MiB + 1);  // keeps the two segments apart
  const auto small = allocator.allocate(40 * MiB);
  allocator.free(big);
  allocator.free(small);
  allocator.allocate(40 * MiB);  // takes the 40 MiB segment, leaving the 80 MiB one whole
  allocator.allocate(80 * MiB);
  EXPECT_EQ(allocator.stats().reserved, 140 * MiB);
}

TEST(CachingAllocator, AFullDeviceReleasesCachedSegmentsThenRunsOutOfMemory) {
  CachingAllocatorModel allocator({.device_limit = 300 * MiB, .expandable_segments = false});
  allocator.free(allocator.allocate(200 * MiB));
  allocator.allocate(250 * MiB);  // 450 MiB would exceed the device: the free segment is returned
  EXPECT_EQ(allocator.stats().reserved, 250 * MiB);
  EXPECT_EQ(allocator.stats().peak_reserved, 250 * MiB);
  EXPECT_EQ(allocator.stats().cache_flushes, 1);
  EXPECT_FALSE(allocator.stats().out_of_memory);
  allocator.allocate(100 * MiB);
  EXPECT_TRUE(allocator.stats().out_of_memory);
}

TEST(CachingAllocator, ExpandableSegmentsGrowTheFreeTailInsteadOfAddingASegment) {
  CachingAllocatorModel fixed;
  fixed.free(fixed.allocate(30 * MiB));
  fixed.allocate(50 * MiB);
  EXPECT_EQ(fixed.stats().reserved, 80 * MiB);
  CachingAllocatorModel expandable({.device_limit = 0, .expandable_segments = true});
  expandable.free(expandable.allocate(30 * MiB));  // two 20 MiB pages
  EXPECT_EQ(expandable.stats().reserved, 40 * MiB);
  expandable.allocate(50 * MiB);  // the free 40 MiB at the end grows by one page
  EXPECT_EQ(expandable.stats().reserved, 60 * MiB);
  EXPECT_EQ(expandable.stats().allocated, 50 * MiB);
}

TEST(CachingAllocator, RejectsFreeingWhatIsNotInUse) {
  CachingAllocatorModel allocator;
  const auto a = allocator.allocate(MiB);
  allocator.free(a);
  EXPECT_THROW(allocator.free(a), std::invalid_argument);
  EXPECT_THROW(allocator.allocate(0), std::invalid_argument);
}

}  // namespace
}  // namespace zerolens
