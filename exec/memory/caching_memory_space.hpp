#pragma once
// A caching allocator over another memory space, as PyTorch's CUDA caching allocator does it
// (simplified): freed blocks are kept and handed out again for requests they fit, so the many
// short-lived buffers of a training step cost no allocation in the inner space (cudaFree
// synchronises the whole device). Requests are rounded up to 512 bytes and served by the smallest
// cached block at least as large and at most twice as large (larger blocks would strand memory);
// reused blocks are zeroed, as MemorySpace::allocate promises. When the inner space cannot
// allocate, the cached blocks are returned to it and the allocation is tried once more. The
// element operations are the inner space's. What the cache holds from the inner space (reserved)
// beside what is in use (allocated) is this allocator's fragmentation.
#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>

#include "exec/memory/memory_space.hpp"
#include "exec/memory/numbers.hpp"

namespace zerolens::exec {

struct CachingStats {
  Bytes allocated = 0, reserved = 0;            // now: in use (rounded), held from the inner space
  Bytes peak_allocated = 0, peak_reserved = 0;  // highest since construction
  std::int64_t inner_allocations = 0;           // blocks taken from the inner space
  std::int64_t reuses = 0;                      // requests served from the cache
};

class CachingMemorySpace final : public MemorySpace {
 public:
  static constexpr std::size_t kRounding = 512;

  explicit CachingMemorySpace(MemorySpace& inner) : inner_(inner) {}
  ~CachingMemorySpace() override;  // returns every block (blocks still in use are a caller's leak)
  CachingMemorySpace(const CachingMemorySpace&) = delete;
  CachingMemorySpace& operator=(const CachingMemorySpace&) = delete;

  const CachingStats& stats() const { return stats_; }
  void release_cached();  // gives the free blocks back to the inner space

  std::string name() const override { return "caching " + inner_.name(); }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* pointer, std::size_t bytes) noexcept override;
  void copy_to_host(void* host, const void* here, std::size_t bytes) override;
  void copy_from_host(void* here, const void* host, std::size_t bytes) override;
  void copy_within(void* to, const void* from, std::size_t bytes) override;

  void convert(Numbers to, Numbers from) override;
  void add_scaled(Numbers to, Numbers from, float factor) override;
  void scale(Numbers values, float factor) override;
  void fill_zero(Numbers values) override;
  bool has_inf_or_nan(Numbers values) override;
  double sum_of_squares(Numbers values) override;
  void optimizer_update(const Optimizer& optimizer, Numbers params, Numbers grads, Numbers first,
                        Numbers second) override;

 private:
  Numbers inner_view(Numbers numbers) const;  // the same numbers, as the inner space's
  void* from_cache(std::size_t rounded);      // nullptr when no cached block fits
  void* from_inner(std::size_t rounded);
  void note_in_use(void* block, std::size_t size);

  MemorySpace& inner_;
  std::multimap<std::size_t, void*> free_;       // size -> cached block
  std::unordered_map<void*, std::size_t> used_;  // block in use -> its size
  CachingStats stats_;
};

}  // namespace zerolens::exec
