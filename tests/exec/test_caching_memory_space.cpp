// The caching allocator over a memory space the host cannot touch (guarded_memory.hpp): freed
// blocks come back for requests they fit (and zeroed), not for requests less than half their size;
// its allocated/reserved figures follow a hand-worked sequence; a full inner space gets the cache
// back before the caching allocator gives up; element operations are the inner space's.
#include <gtest/gtest.h>

#include <vector>

#include "exec/memory/caching_memory_space.hpp"
#include "guarded_memory.hpp"

namespace zerolens::exec {
namespace {

using testing::GuardedMemorySpace;

std::vector<float> read_floats(MemorySpace& space, void* block, std::size_t count) {
  std::vector<float> values(count);
  Numbers({static_cast<float*>(block), count}, &space).read(values);
  return values;
}

TEST(CachingMemorySpace, AFreedBlockServesTheNextRequestItFitsZeroed) {
  GuardedMemorySpace inner;
  CachingMemorySpace cache(inner);
  void* first = cache.allocate(4000);  // rounded to 4096
  Numbers({static_cast<float*>(first), 1000}, &cache).write(std::vector<float>(1000, 7.0f));
  cache.deallocate(first, 4000);
  EXPECT_EQ(inner.allocations(), 1u);   // kept, not returned
  void* second = cache.allocate(3000);  // rounded to 3072: the 4096 block fits (at most twice)
  EXPECT_EQ(second, first);
  EXPECT_EQ(read_floats(cache, second, 1000), std::vector<float>(1000, 0.0f));
  EXPECT_EQ(cache.stats().reuses, 1);
  void* third = cache.allocate(1000);  // nothing free
  EXPECT_NE(third, first);
  cache.deallocate(second, 3000);
  void* small = cache.allocate(1500);  // rounded to 1536: 4096 is more than twice that
  EXPECT_NE(small, first);
  EXPECT_EQ(cache.stats().inner_allocations, 3);
  EXPECT_EQ(inner.allocations(), 3u);
}

// Hand-worked: 1000 -> 1024 in use; 600 -> 1024 (512 x 2); free the first: allocated 1024,
// reserved 2048; 700 -> 1024 reuses it; peak allocated 2048; release_cached gives nothing back
// while both are in use, one block after a free.
TEST(CachingMemorySpace, AllocatedAndReservedFollowTheRequests) {
  GuardedMemorySpace inner;
  CachingMemorySpace cache(inner);
  void* a = cache.allocate(1000);
  void* b = cache.allocate(600);
  EXPECT_EQ(cache.stats().allocated, 2048);
  EXPECT_EQ(cache.stats().reserved, 2048);
  cache.deallocate(a, 1000);
  EXPECT_EQ(cache.stats().allocated, 1024);
  EXPECT_EQ(cache.stats().reserved, 2048);
  void* c = cache.allocate(700);
  EXPECT_EQ(c, a);
  cache.release_cached();
  EXPECT_EQ(inner.allocations(), 2u);
  cache.deallocate(b, 600);
  cache.release_cached();
  EXPECT_EQ(inner.allocations(), 1u);
  EXPECT_EQ(cache.stats().reserved, 1024);
  EXPECT_EQ(cache.stats().peak_allocated, 2048);
  EXPECT_EQ(cache.stats().peak_reserved, 2048);
  EXPECT_EQ(cache.allocate(0), nullptr);
  cache.deallocate(c, 700);
}

TEST(CachingMemorySpace, AFullInnerSpaceGetsTheCacheBackFirst) {
  GuardedMemorySpace inner;
  inner.capacity = 8192;
  CachingMemorySpace cache(inner);
  void* a = cache.allocate(4096);
  cache.deallocate(a, 4096);
  void* b = cache.allocate(6000);  // 4096 cached + 6144 > 8192: the cached block goes first
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(inner.allocations(), 1u);
  EXPECT_EQ(cache.stats().reserved, 6144);
  EXPECT_THROW(cache.allocate(4096), std::bad_alloc);  // really full
  cache.deallocate(b, 6000);
}

TEST(CachingMemorySpace, ElementOperationsAreTheInnerSpacesAndBlocksGoBackAtTheEnd) {
  GuardedMemorySpace inner;
  {
    CachingMemorySpace cache(inner);
    MemoryLedger ledger;
    ledger.place(Device::Gpu, &cache);
    NumberBuffer a(ledger, Device::Gpu, Component::GradsFull, NumberFormat::Bf16, 100);
    NumberBuffer b(ledger, Device::Gpu, Component::GradsFull, NumberFormat::Fp32, 100);
    a.view().write(std::vector<float>(100, 1.5f));
    b.view().copy_from(a.view());
    b.view().add_scaled(a.view(), 2.0f);
    EXPECT_EQ(b.get(99), 4.5f);
    EXPECT_EQ(b.view().sum_of_squares(), 100 * 4.5 * 4.5);
    EXPECT_FALSE(a.view().has_inf_or_nan());
    EXPECT_GT(inner.counts.element_ops, 0);
    void* foreign = inner.allocate(64);  // the inner space's own numbers are not the cache's
    EXPECT_THROW(cache.fill_zero(Numbers({static_cast<float*>(foreign), 16}, &inner)),
                 std::invalid_argument);
    inner.deallocate(foreign, 64);
  }
  EXPECT_EQ(inner.allocations(), 0u);
}

}  // namespace
}  // namespace zerolens::exec
