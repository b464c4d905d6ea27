#include "exec/cuda/cuda_memory.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "exec/cuda/cuda_status.hpp"

namespace zerolens::exec {
namespace cuda_memory_detail {

void* allocate_device(std::size_t bytes) {
  void* data = nullptr;
  const cudaError_t allocated = cudaMalloc(&data, bytes);
  if (allocated != cudaSuccess) cudaGetLastError();  // not left behind for the next launch check
  check_cuda(allocated, "cudaMalloc");
  // cudaMemset runs on the legacy default stream and may still be running when it returns; a
  // cudaStreamNonBlocking producer does not wait for that stream, so its write could land first and
  // be zeroed (seen on the H200 with two ranks sharing the GPU). Zeroed before the buffer is handed
  // out.
  cudaError_t zeroed = cudaMemset(data, 0, bytes);
  if (zeroed == cudaSuccess) zeroed = cudaStreamSynchronize(nullptr);
  if (zeroed != cudaSuccess) {
    cudaFree(data);
    check_cuda(zeroed, "cudaMemset");
  }
  return data;
}

// Destructors cannot throw: a failed free is left for the next checked call to report.
void free_device(void* data) noexcept { cudaFree(data); }

void* allocate_pinned(std::size_t bytes) {
  void* data = nullptr;
  check_cuda(cudaHostAlloc(&data, bytes, cudaHostAllocDefault), "cudaHostAlloc");
  std::fill_n(static_cast<unsigned char*>(data), bytes, 0);
  return data;
}

void free_pinned(void* data) noexcept { cudaFreeHost(data); }

void copy_to_device(void* device, const void* host, std::size_t bytes) {
  if (bytes != 0) check_cuda(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
}

void copy_to_host(void* host, const void* device, std::size_t bytes) {
  if (bytes != 0) check_cuda(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

}  // namespace cuda_memory_detail

void throw_buffer_size_mismatch(std::size_t buffer, std::size_t host) {
  throw std::length_error("DeviceBuffer copy: " + std::to_string(host) + " host elements for a buffer of " +
                          std::to_string(buffer));
}

DriverMemorySnapshot DriverMemorySnapshot::take(const MemoryLedger& ledger) {
  std::size_t free = 0, total = 0;
  check_cuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return {Bytes(free), Bytes(total), ledger.current(Device::Gpu)};
}

Bytes unaccounted_growth(const DriverMemorySnapshot& before, const DriverMemorySnapshot& after) {
  const Bytes driver = after.used() - before.used();
  const Bytes ledger = after.ledger_gpu - before.ledger_gpu;
  return std::max<Bytes>(0, driver - ledger);
}

Bytes charge_unaccounted_growth(MemoryLedger& ledger, Component component, const DriverMemorySnapshot& before,
                                const DriverMemorySnapshot& after) {
  if (category_of(component) != Category::Overhead) {
    throw std::invalid_argument(std::string("driver memory charged as ") + to_string(component) +
                                ", not an overhead component");
  }
  const Bytes bytes = unaccounted_growth(before, after);
  ledger.allocate(Device::Gpu, component, bytes);
  return bytes;
}

}  // namespace zerolens::exec
