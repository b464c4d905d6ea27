#pragma once
// The executor's accounting: every buffer is allocated through a ledger under the simulator's
// device and component names, so measured memory is reported per device and category exactly as
// the plan predicts it (current, peak with its breakdown, and samples over time).
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sim/schedule/memory_replay.hpp"
#include "sim/schedule/schedule.hpp"

namespace zerolens::exec {

class MemorySpace;

class MemoryLedger {
 public:
  // Where the model-state buffers (NumberBuffer, ScratchFloats) of `device` are allocated: a
  // memory space the host cannot address (exec/memory/memory_space.hpp), or host memory (nullptr,
  // the default). Set before any buffer of the device exists; the space must outlive them.
  void place(Device device, MemorySpace* space) { spaces_[index(device)] = space; }
  MemorySpace* space(Device device) const { return spaces_[index(device)]; }

  void allocate(Device device, Component component, Bytes bytes);
  void release(Device device, Component component, Bytes bytes);  // throws std::logic_error below zero

  Bytes current(Device device) const { return current_[index(device)]; }
  Bytes peak(Device device) const { return peak_[index(device)]; }
  Bytes current(Device device, Component component) const;
  // Category breakdown at the moment the device's peak was reached.
  CategoryBytes categories_at_peak(Device device) const { return at_peak_[index(device)]; }
  CategoryBytes current_categories(Device device) const;
  // The highest each category reached since the last reset_peaks (not necessarily together).
  CategoryBytes category_highs(Device device) const { return category_high_[index(device)]; }

  // Starts a new peak window at the current level (e.g. after initialisation, per step).
  void reset_peaks();

  // The CPU backend's own working memory that no plan component describes (the fp32 copy of one
  // 16-bit layer the fp32 kernels compute on): counted apart, never in current(), peak() or the
  // categories, so those stay comparable with the plan while this stays visible.
  void allocate_scratch(Device device, Bytes bytes);
  void release_scratch(Device device, Bytes bytes);  // throws std::logic_error below zero
  Bytes scratch_current(Device device) const { return scratch_current_[index(device)]; }
  Bytes scratch_peak(Device device) const { return scratch_peak_[index(device)]; }

 private:
  static std::size_t index(Device device) { return std::size_t(device); }
  std::array<ComponentBytes, kDeviceCount> components_{};
  std::array<Bytes, kDeviceCount> current_{};
  std::array<Bytes, kDeviceCount> peak_{};
  std::array<CategoryBytes, kDeviceCount> at_peak_{};
  std::array<CategoryBytes, kDeviceCount> category_current_{};
  std::array<CategoryBytes, kDeviceCount> category_high_{};
  std::array<Bytes, kDeviceCount> scratch_current_{};
  std::array<Bytes, kDeviceCount> scratch_peak_{};
  std::array<MemorySpace*, kDeviceCount> spaces_{};
};

// The bytes per element a buffer stands for in the plan when the CPU backend holds it wider: the
// fp32 kernels keep 16-bit activations in fp32, so the ledger counts `per_element` bytes under the
// buffer's component and the rest as scratch (MemoryLedger::allocate_scratch).
struct HeldAs {
  std::size_t per_element = 0;
};

// An owned, aligned array of T accounted in a ledger for its whole life. Move-only.
template <typename T>
class TrackedBuffer {
 public:
  TrackedBuffer() = default;
  TrackedBuffer(MemoryLedger& ledger, Device device, Component component, std::size_t count,
                std::size_t alignment = 64);
  // Counted as `held.per_element` bytes per element (at most sizeof(T)), the rest as scratch.
  TrackedBuffer(MemoryLedger& ledger, Device device, Component component, std::size_t count, HeldAs held);
  ~TrackedBuffer() { reset(); }
  TrackedBuffer(TrackedBuffer&& other) noexcept { swap(other); }
  TrackedBuffer& operator=(TrackedBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      swap(other);
    }
    return *this;
  }
  TrackedBuffer(const TrackedBuffer&) = delete;
  TrackedBuffer& operator=(const TrackedBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return count_; }
  Bytes bytes() const { return Bytes(count_ * sizeof(T)); }
  std::span<T> span() { return {data_, count_}; }
  std::span<const T> span() const { return {data_, count_}; }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  void reset();  // frees now and records it

 private:
  void swap(TrackedBuffer& other) noexcept;
  void allocate_storage(std::size_t alignment);  // count_ elements, value-initialised
  MemoryLedger* ledger_ = nullptr;
  Device device_ = Device::Gpu;
  Component component_ = Component::ParamsFull;
  T* data_ = nullptr;
  std::size_t count_ = 0;
  Bytes scratch_ = 0;  // bytes counted as scratch, not under component_
};

extern template class TrackedBuffer<float>;
extern template class TrackedBuffer<std::uint16_t>;
extern template class TrackedBuffer<std::int32_t>;
extern template class TrackedBuffer<std::byte>;

}  // namespace zerolens::exec
