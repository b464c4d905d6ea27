#include "exec/memory/memory_ledger.hpp"
#include "sim/schedule/memory_replay.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace zerolens::exec {

void MemoryLedger::allocate(Device device, Component component, Bytes bytes) {
  const std::size_t d = index(device);
  components_[d][std::size_t(component)] += bytes;
  current_[d] += bytes;
  const auto c = std::size_t(category_of(component));
  category_current_[d][c] += bytes;
  category_high_[d][c] = std::max(category_high_[d][c], category_current_[d][c]);
  if (current_[d] > peak_[d]) {
    peak_[d] = current_[d];
    at_peak_[d] = current_categories(device);
  }
}

void MemoryLedger::release(Device device, Component component, Bytes bytes) {
  const std::size_t d = index(device);
  Bytes& held = components_[d][std::size_t(component)];
  if (bytes > held) {
    throw std::logic_error(std::string("memory ledger: freeing more ") + to_string(component) + " on " +
                           to_string(device) + " than was allocated");
  }
  held -= bytes;
  current_[d] -= bytes;
  category_current_[d][std::size_t(category_of(component))] -= bytes;
}

Bytes MemoryLedger::current(Device device, Component component) const {
  return components_[index(device)][std::size_t(component)];
}

CategoryBytes MemoryLedger::current_categories(Device device) const {
  CategoryBytes categories{};
  const auto& held = components_[index(device)];
  for (int c = 0; c < kComponentCount; ++c) categories[std::size_t(category_of(Component(c)))] += held[std::size_t(c)];
  return categories;
}

void MemoryLedger::reset_peaks() {
  for (int d = 0; d < kDeviceCount; ++d) {
    peak_[std::size_t(d)] = current_[std::size_t(d)];
    at_peak_[std::size_t(d)] = current_categories(Device(d));
    category_high_[std::size_t(d)] = category_current_[std::size_t(d)];
    scratch_peak_[std::size_t(d)] = scratch_current_[std::size_t(d)];
  }
}

void MemoryLedger::allocate_scratch(Device device, Bytes bytes) {
  Bytes& current = scratch_current_[index(device)];
  current += bytes;
  scratch_peak_[index(device)] = std::max(scratch_peak_[index(device)], current);
}

void MemoryLedger::release_scratch(Device device, Bytes bytes) {
  Bytes& current = scratch_current_[index(device)];
  if (bytes > current) throw std::logic_error("memory ledger: scratch released twice");
  current -= bytes;
}

template <typename T>
TrackedBuffer<T>::TrackedBuffer(MemoryLedger& ledger, Device device, Component component, std::size_t count,
                                std::size_t alignment)
    : ledger_(&ledger), device_(device), component_(component), count_(count) {
  allocate_storage(alignment);
  ledger_->allocate(device_, component_, bytes());
}

template <typename T>
TrackedBuffer<T>::TrackedBuffer(MemoryLedger& ledger, Device device, Component component, std::size_t count,
                                HeldAs held)
    : ledger_(&ledger), device_(device), component_(component), count_(count) {
  if (held.per_element == 0 || held.per_element > sizeof(T)) {
    throw std::logic_error("memory ledger: a buffer held as " + std::to_string(held.per_element) +
                           " bytes per element of " + std::to_string(sizeof(T)));
  }
  allocate_storage(64);
  scratch_ = Bytes(count * (sizeof(T) - held.per_element));
  ledger_->allocate(device_, component_, bytes() - scratch_);
  ledger_->allocate_scratch(device_, scratch_);
}

template <typename T>
void TrackedBuffer<T>::allocate_storage(std::size_t alignment) {
  // aligned_alloc needs a size that is a multiple of the alignment.
  const std::size_t size = (count_ * sizeof(T) + alignment - 1) / alignment * alignment;
  data_ = static_cast<T*>(std::aligned_alloc(alignment, size == 0 ? alignment : size));
  if (!data_) throw std::bad_alloc();
  for (std::size_t i = 0; i < count_; ++i) new (data_ + i) T{};
}

template <typename T>
void TrackedBuffer<T>::reset() {
  if (!ledger_) return;
  ledger_->release(device_, component_, bytes() - scratch_);
  ledger_->release_scratch(device_, scratch_);
  scratch_ = 0;
  std::free(data_);
  ledger_ = nullptr;
  data_ = nullptr;
  count_ = 0;
}

template <typename T>
void TrackedBuffer<T>::swap(TrackedBuffer& other) noexcept {
  std::swap(ledger_, other.ledger_);
  std::swap(device_, other.device_);
  std::swap(component_, other.component_);
  std::swap(data_, other.data_);
  std::swap(count_, other.count_);
  std::swap(scratch_, other.scratch_);
}

template class TrackedBuffer<float>;
template class TrackedBuffer<std::uint16_t>;
template class TrackedBuffer<std::int32_t>;
template class TrackedBuffer<std::byte>;

}  // namespace zerolens::exec
