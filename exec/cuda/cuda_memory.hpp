#pragma once
// Device and pinned host memory accounted in the ledger, as TrackedBuffer accounts host memory:
// every buffer is charged under sim's device and component names for its whole life. What the
// driver holds beyond the ledger (the CUDA context, cuBLAS/NCCL workspaces, allocation rounding) is
// read with cudaMemGetInfo and charged under the Overhead components, so measured GPU memory lines
// up with a plan that counts those too. Plain C++: g++ code includes it.
#include <cstddef>
#include <span>
#include <utility>

#include "exec/memory/memory_ledger.hpp"

namespace zerolens::exec {

namespace cuda_memory_detail {
void* allocate_device(std::size_t bytes);  // cudaMalloc, zero-filled; throws naming the call
void free_device(void* data) noexcept;
void* allocate_pinned(std::size_t bytes);  // cudaHostAlloc, zero-filled; throws naming the call
void free_pinned(void* data) noexcept;
void copy_to_device(void* device, const void* host, std::size_t bytes);  // synchronous cudaMemcpy
void copy_to_host(void* host, const void* device, std::size_t bytes);

// One buffer's entry in a ledger, released exactly once (on reset, destruction or move-assignment).
class LedgerCharge {
 public:
  LedgerCharge() = default;
  LedgerCharge(MemoryLedger& ledger, Device device, Component component, Bytes bytes)
      : ledger_(&ledger), device_(device), component_(component), bytes_(bytes) {
    ledger.allocate(device, component, bytes);
  }
  LedgerCharge(LedgerCharge&& other) noexcept { swap(other); }
  LedgerCharge& operator=(LedgerCharge&& other) noexcept {
    if (this != &other) {
      release();
      swap(other);
    }
    return *this;
  }
  LedgerCharge(const LedgerCharge&) = delete;
  LedgerCharge& operator=(const LedgerCharge&) = delete;
  ~LedgerCharge() { release(); }
  void release() {
    if (ledger_) ledger_->release(device_, component_, bytes_);
    ledger_ = nullptr;
  }
  void swap(LedgerCharge& other) noexcept {
    std::swap(ledger_, other.ledger_);
    std::swap(device_, other.device_);
    std::swap(component_, other.component_);
    std::swap(bytes_, other.bytes_);
  }

 private:
  MemoryLedger* ledger_ = nullptr;
  Device device_ = Device::Gpu;
  Component component_ = Component::ParamsFull;
  Bytes bytes_ = 0;
};

// Raw memory from `Allocate`/`Free` plus its charge; memory first, so a failed allocation leaves
// the ledger untouched.
template <typename T, void* (*Allocate)(std::size_t), void (*Free)(void*) noexcept>
class ChargedMemory {
 public:
  ChargedMemory() = default;
  ChargedMemory(MemoryLedger& ledger, Device device, Component component, std::size_t count)
      : data_(count == 0 ? nullptr : static_cast<T*>(Allocate(count * sizeof(T)))), count_(count),
        charge_(ledger, device, component, Bytes(count * sizeof(T))) {}
  ChargedMemory(ChargedMemory&& other) noexcept { swap(other); }
  ChargedMemory& operator=(ChargedMemory&& other) noexcept {
    if (this != &other) {
      reset();
      swap(other);
    }
    return *this;
  }
  ChargedMemory(const ChargedMemory&) = delete;
  ChargedMemory& operator=(const ChargedMemory&) = delete;
  ~ChargedMemory() { reset(); }

  T* data() const { return data_; }
  std::size_t size() const { return count_; }
  Bytes bytes() const { return Bytes(count_ * sizeof(T)); }
  std::span<T> span() const { return {data_, count_}; }
  void reset() {  // frees now and records it
    if (data_) Free(data_);
    charge_.release();
    data_ = nullptr;
    count_ = 0;
  }

 private:
  void swap(ChargedMemory& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    charge_.swap(other.charge_);
  }
  T* data_ = nullptr;
  std::size_t count_ = 0;
  LedgerCharge charge_;
};
}  // namespace cuda_memory_detail

// `count` elements of T in GPU memory (cudaMalloc, zero-filled as TrackedBuffer is), charged to the
// ledger's gpu device under `component`. Move-only; span() holds device pointers (for kernels and
// the device communicators), the copies are synchronous.
template <typename T>
class DeviceBuffer
    : public cuda_memory_detail::ChargedMemory<T, cuda_memory_detail::allocate_device,
                                               cuda_memory_detail::free_device> {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(MemoryLedger& ledger, Component component, std::size_t count)
      : DeviceBuffer::ChargedMemory(ledger, Device::Gpu, component, count) {}
  void copy_from_host(std::span<const T> host) {
    require_size(host.size());
    cuda_memory_detail::copy_to_device(this->data(), host.data(), host.size_bytes());
  }
  void copy_to_host(std::span<T> host) const {
    require_size(host.size());
    cuda_memory_detail::copy_to_host(host.data(), this->data(), host.size_bytes());
  }

 private:
  void require_size(std::size_t count) const;
};

// `count` elements of T in page-locked host memory (cudaHostAlloc, zero-filled), charged to the
// ledger's cpu device: offloaded states and staging, which the GPU copies to and from directly.
template <typename T>
class PinnedHostBuffer
    : public cuda_memory_detail::ChargedMemory<T, cuda_memory_detail::allocate_pinned,
                                               cuda_memory_detail::free_pinned> {
 public:
  PinnedHostBuffer() = default;
  PinnedHostBuffer(MemoryLedger& ledger, Component component, std::size_t count)
      : PinnedHostBuffer::ChargedMemory(ledger, Device::Cpu, component, count) {}
  T& operator[](std::size_t i) const { return this->data()[i]; }
};

void throw_buffer_size_mismatch(std::size_t buffer, std::size_t host);

template <typename T>
void DeviceBuffer<T>::require_size(std::size_t count) const {
  if (count != this->size()) throw_buffer_size_mismatch(this->size(), count);
}

// What the driver reports for the current device (cudaMemGetInfo), with the ledger's gpu figure at
// the same moment, so the difference between two snapshots splits into what the ledger accounts and
// what it does not (context growth, library workspaces, rounding).
struct DriverMemorySnapshot {
  Bytes free = 0;
  Bytes total = 0;
  Bytes ledger_gpu = 0;
  // Throws std::runtime_error naming cudaMemGetInfo (e.g. without a device).
  static DriverMemorySnapshot take(const MemoryLedger& ledger);
  Bytes used() const { return total - free; }
};

// The growth of the driver's used memory from `before` to `after` minus the ledger's growth over
// the same interval; 0 when the ledger grew as much. On a GPU the process has to itself, the CUDA
// context is the unaccounted growth from DriverMemorySnapshot{total, total, 0} (nothing in use) to
// the first snapshot; on a shared GPU other processes' allocations land in it too.
Bytes unaccounted_growth(const DriverMemorySnapshot& before, const DriverMemorySnapshot& after);

// Charges unaccounted_growth to the ledger's gpu device under `component`, which must be an
// Overhead component (CudaContext, LibraryWorkspace); returns the bytes charged. The caller
// releases them like any charge (ledger.release) when the context or workspace goes away.
Bytes charge_unaccounted_growth(MemoryLedger& ledger, Component component, const DriverMemorySnapshot& before,
                                const DriverMemorySnapshot& after);

}  // namespace zerolens::exec
