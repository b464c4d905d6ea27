#pragma once
// CudaGpt2Model's internals (exec/cuda/gpt2_cuda_model.cpp only): the backend the layer steps of
// exec/model/gpt2_layers.hpp run on, with its device buffers.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "exec/cuda/cuda_memory.hpp"
#include "exec/memory/memory_ledger.hpp"
#include "kernels/cuda/kernels.hpp"

namespace zerolens::exec {

// `count` floats of zero-filled device memory charged as TrackedBuffer charges host memory:
// `held.per_element` bytes per element under the component, the rest of the 4 as scratch
// (MemoryLedger::allocate_scratch). Move-only; released on reset, destruction or move-assignment.
class HeldDeviceBuffer {
 public:
  HeldDeviceBuffer() = default;
  HeldDeviceBuffer(MemoryLedger& ledger, Component component, std::size_t count, HeldAs held);
  HeldDeviceBuffer(HeldDeviceBuffer&& other) noexcept { swap(other); }
  HeldDeviceBuffer& operator=(HeldDeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      swap(other);
    }
    return *this;
  }
  HeldDeviceBuffer(const HeldDeviceBuffer&) = delete;
  HeldDeviceBuffer& operator=(const HeldDeviceBuffer&) = delete;
  ~HeldDeviceBuffer() { reset(); }

  float* data() const { return data_; }
  std::size_t size() const { return count_; }
  void copy_from_host(std::span<const float> host);  // synchronous
  void copy_to_host(std::span<float> host) const;    // synchronous
  void reset();

 private:
  void swap(HeldDeviceBuffer& other) noexcept;
  float* data_ = nullptr;
  std::size_t count_ = 0;
  cuda_memory_detail::LedgerCharge charge_;  // the held bytes under the component
  MemoryLedger* ledger_ = nullptr;           // for the scratch bytes
  MemorySpace* space_ = nullptr;             // where data_ came from (nullptr: cudaMalloc)
  Bytes scratch_ = 0;
};

// Gpt2Layers' backend on the GPU: HeldDeviceBuffers, charged as the CPU model's buffers are, and
// kernels/cuda's kernels, every call on the legacy default stream (see gpt2_cuda_model.hpp), the
// GEMMs and attention with the model's cuBLAS handles.
class CudaGpt2Backend {
 public:
  using Buffer = HeldDeviceBuffer;
  using Tokens = DeviceBuffer<std::int32_t>;
  static constexpr const char* kModelName = "CudaGpt2Model";
  // Tensor parallelism runs on the CPU backend only: the cuda backend refuses --tp and --pp.
  static constexpr bool kTensorParallel = false;

  // Creates the cuBLAS/cuBLASLt handles and their workspace on the current device, charging the
  // driver memory they take (at least the workspace) as LibraryWorkspace for the backend's life.
  explicit CudaGpt2Backend(MemoryLedger& ledger);
  Bytes workspace_bytes() const { return workspace_bytes_; }

  Buffer buffer(Component component, std::size_t count, HeldAs held) const {
    return {*ledger_, component, count, held};
  }
  Tokens tokens(std::size_t count) const { return {*ledger_, Component::ActivationsStored, count}; }
  static void upload(Tokens& to, std::span<const std::int32_t> host) { to.copy_from_host(host); }
  static void fill(Buffer& buffer, float value) {
    buffer.copy_from_host(std::vector<float>(buffer.size(), value));
  }
  static std::vector<float> to_host(const Buffer& buffer);  // synchronous: waits for the kernels
  // count floats from device to device, and the fused q/k/v copies (strided 2D copies).
  void copy(float* to, const float* from, std::size_t count) const;
  void copy_to_fused(float* fused, const float* part, std::size_t block, std::size_t rows,
                     std::size_t width) const;
  void copy_from_fused(float* part, const float* fused, std::size_t block, std::size_t rows,
                       std::size_t width) const;

  // kernels/cpu.hpp's kernels by name and CPU arguments, run by kernels/cuda on the stream.
  template <typename... A>
  void encoder_forward(A... a) const {
    kernels::cuda::encoder_forward(a..., stream_);
  }
  template <typename... A>
  void encoder_backward(A... a) const {
    kernels::cuda::encoder_backward(a..., stream_);
  }
  template <typename... A>
  void layernorm_forward(A... a) const {
    kernels::cuda::layernorm_forward(a..., stream_);
  }
  template <typename... A>
  void layernorm_backward(A... a) const {
    kernels::cuda::layernorm_backward(a..., stream_);
  }
  template <typename... A>
  void matmul_forward(A... a) const {
    kernels::cuda::matmul_forward(a..., *blas_, stream_);
  }
  template <typename... A>
  void matmul_backward(A... a) const {
    kernels::cuda::matmul_backward(a..., *blas_, stream_);
  }
  template <typename... A>
  void attention_forward(A... a) const {
    kernels::cuda::attention_forward(a..., *blas_, stream_);
  }
  template <typename... A>
  void attention_backward(A... a) const {
    kernels::cuda::attention_backward(a..., *blas_, stream_);
  }
  template <typename... A>
  void residual_forward(A... a) const {
    kernels::cuda::residual_forward(a..., stream_);
  }
  template <typename... A>
  void gelu_forward(A... a) const {
    kernels::cuda::gelu_forward(a..., stream_);
  }
  template <typename... A>
  void gelu_backward_inplace(A... a) const {
    kernels::cuda::gelu_backward_inplace(a..., stream_);
  }
  template <typename... A>
  void crossentropy_softmax_forward(A... a) const {
    kernels::cuda::crossentropy_softmax_forward(a..., stream_);
  }
  template <typename... A>
  void crossentropy_softmax_backward(A... a) const {
    kernels::cuda::crossentropy_softmax_backward(a..., stream_);
  }

 private:
  MemoryLedger* ledger_;
  cudaStream_t stream_ = nullptr;  // the legacy default stream
  std::unique_ptr<kernels::cuda::BlasHandles> blas_;
  Bytes workspace_bytes_ = 0;
  cuda_memory_detail::LedgerCharge workspace_charge_;  // LibraryWorkspace
};

}  // namespace zerolens::exec
