#pragma once
// CUDA runtime helpers of the GPU kernels (namespace zerolens::kernels::cuda): error checks that
// throw, a device probe that never throws, and an RAII device buffer. Plain C++: g++ code includes
// it. Every kernel of this folder takes device pointers and a cudaStream_t and is asynchronous.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace zerolens::kernels::cuda {

// Throws std::runtime_error "<call>: <CUDA error string> (<error name>)" unless status is
// cudaSuccess. `call` names the CUDA call or kernel launch that failed.
void check(cudaError_t status, const char* call);

// Throws when the last kernel launch failed (cudaGetLastError), naming `kernel`.
void check_launch(const char* kernel);

// How many CUDA devices this process can use; never throws. count == 0 when there is no device or
// driver, with `reason` saying why (the failing call and its error string).
struct DeviceProbe {
  int count = 0;
  std::string reason;
};
DeviceProbe probe_devices();

// The real GPU architectures this library was compiled for, as 10 * major + minor (e.g. 80, 90),
// from nvcc's __CUDA_ARCH_LIST__.
std::vector<int> compiled_architectures();

// `count` elements of T in device memory (cudaMalloc / cudaFree), uninitialised. Movable, not
// copyable. The constructor throws std::runtime_error naming cudaMalloc on failure.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count == 0) return;
    void* data = nullptr;
    check(cudaMalloc(&data, count * sizeof(T)), "cudaMalloc");
    data_ = static_cast<T*>(data);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_), count_(other.count_) {
    other.data_ = nullptr;
    other.count_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = other.data_;
      count_ = other.count_;
      other.data_ = nullptr;
      other.count_ = 0;
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  T* data() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }

  // Synchronous copies of size() elements (cudaMemcpy).
  void upload(const std::vector<T>& host) {
    if (host.size() != count_) throw_size_mismatch();
    check(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice), "cudaMemcpy upload");
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    check(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy download");
    return host;
  }

 private:
  void release() noexcept {
    if (data_ != nullptr) cudaFree(data_);  // no throw from a destructor; errors resurface later
    data_ = nullptr;
  }
  [[noreturn]] static void throw_size_mismatch();

  T* data_ = nullptr;
  std::size_t count_ = 0;
};

template <typename T>
void DeviceBuffer<T>::throw_size_mismatch() {
  throw std::length_error("DeviceBuffer::upload: host vector size differs from the buffer's");
}

// Uploads a host vector into a new device buffer.
template <typename T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
  DeviceBuffer<T> buffer(host.size());
  buffer.upload(host);
  return buffer;
}

// Grid size for one thread per element with `block` threads, capped so huge counts grid-stride.
unsigned grid_for(std::size_t count, unsigned block);

}  // namespace zerolens::kernels::cuda
