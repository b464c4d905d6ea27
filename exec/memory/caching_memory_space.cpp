#include "exec/memory/caching_memory_space.hpp"

#include <algorithm>
#include <new>
#include <stdexcept>

namespace zerolens::exec {

CachingMemorySpace::~CachingMemorySpace() {
  release_cached();
  for (const auto& [block, size] : used_) inner_.deallocate(block, size);
}

void CachingMemorySpace::release_cached() {
  for (const auto& [size, block] : free_) {
    inner_.deallocate(block, size);
    stats_.reserved -= Bytes(size);
  }
  free_.clear();
}

void* CachingMemorySpace::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  const std::size_t rounded = (bytes + kRounding - 1) / kRounding * kRounding;
  void* block = from_cache(rounded);
  if (block) return block;
  try {
    return from_inner(rounded);
  } catch (const std::bad_alloc&) {
  } catch (const std::runtime_error&) {  // a CUDA space names cudaMalloc's failure
  }
  release_cached();
  return from_inner(rounded);
}

// The smallest cached block that fits, unless it is more than twice the request.
void* CachingMemorySpace::from_cache(std::size_t rounded) {
  const auto found = free_.lower_bound(rounded);
  if (found == free_.end() || found->first > 2 * rounded) return nullptr;
  const auto [size, block] = *found;
  // zeroed as a new allocation is: 16-bit zeros over the whole block (sizes are multiples of 512);
  // first, so that a failure leaves the block in the cache
  inner_.fill_zero(Numbers({static_cast<std::uint16_t*>(block), size / 2}, NumberFormat::Bf16, &inner_));
  free_.erase(found);
  ++stats_.reuses;
  note_in_use(block, size);
  return block;
}

void* CachingMemorySpace::from_inner(std::size_t rounded) {
  void* block = inner_.allocate(rounded);
  ++stats_.inner_allocations;
  stats_.reserved += Bytes(rounded);
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  note_in_use(block, rounded);
  return block;
}

void CachingMemorySpace::note_in_use(void* block, std::size_t size) {
  used_.emplace(block, size);
  stats_.allocated += Bytes(size);
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
}

void CachingMemorySpace::deallocate(void* pointer, std::size_t) noexcept {
  const auto found = used_.find(pointer);
  if (found == used_.end()) return;  // nullptr for 0 bytes, or not ours
  stats_.allocated -= Bytes(found->second);
  free_.emplace(found->second, pointer);
  used_.erase(found);
}

void CachingMemorySpace::copy_to_host(void* host, const void* here, std::size_t bytes) {
  inner_.copy_to_host(host, here, bytes);
}

void CachingMemorySpace::copy_from_host(void* here, const void* host, std::size_t bytes) {
  inner_.copy_from_host(here, host, bytes);
}

void CachingMemorySpace::copy_within(void* to, const void* from, std::size_t bytes) {
  inner_.copy_within(to, from, bytes);
}

Numbers CachingMemorySpace::inner_view(Numbers numbers) const {
  if (numbers.size() > 0 && numbers.space() != this) {
    throw std::invalid_argument("CachingMemorySpace: numbers of another memory space");
  }
  if (numbers.format() == NumberFormat::Fp32) return Numbers(numbers.wide(), &inner_);
  return {numbers.narrow(), numbers.format(), &inner_};
}

void CachingMemorySpace::convert(Numbers to, Numbers from) {
  inner_.convert(inner_view(to), inner_view(from));
}

void CachingMemorySpace::add_scaled(Numbers to, Numbers from, float factor) {
  inner_.add_scaled(inner_view(to), inner_view(from), factor);
}

void CachingMemorySpace::scale(Numbers values, float factor) {
  inner_.scale(inner_view(values), factor);
}

void CachingMemorySpace::fill_zero(Numbers values) {
  inner_.fill_zero(inner_view(values));
}

bool CachingMemorySpace::has_inf_or_nan(Numbers values) {
  return inner_.has_inf_or_nan(inner_view(values));
}

double CachingMemorySpace::sum_of_squares(Numbers values) {
  return inner_.sum_of_squares(inner_view(values));
}

void CachingMemorySpace::optimizer_update(const Optimizer& optimizer, Numbers params, Numbers grads,
                                          Numbers first, Numbers second) {
  inner_.optimizer_update(optimizer, inner_view(params), inner_view(grads), inner_view(first),
                          inner_view(second));
}

}  // namespace zerolens::exec
