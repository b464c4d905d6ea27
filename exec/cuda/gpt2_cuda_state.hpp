#pragma once
// CudaGpt2Model's internals (exec/cuda/gpt2_cuda_*.cpp only), the structure of exec/gpt2_state.hpp
// with device buffers: per-layer activations, the cuBLAS handles, the layer dispatch's state.
#include <cuda_runtime_api.h>

#include <memory>
#include <span>
#include <vector>

#include "exec/cuda/cuda_memory.hpp"
#include "exec/cuda/gpt2_cuda_model.hpp"
#include "kernels/cuda/blas.hpp"

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

struct CudaBlockActivations : Gpt2BlockBuffers<HeldDeviceBuffer> {
  void allocate(MemoryLedger& ledger, Component component, const Gpt2Dims& d, HeldAs held);
};

// Column block `block` (0 q, 1 k, 2 v) of a fused [rows, 3 x width] device tensor to or from a
// [rows, width] one (strided 2D copies on `stream`).
void copy_to_fused(float* fused, const float* part, std::size_t block, std::size_t rows, std::size_t width,
                   cudaStream_t stream);
void copy_from_fused(float* part, const float* fused, std::size_t block, std::size_t rows, std::size_t width,
                     cudaStream_t stream);
// count floats from device to device on `stream`.
void copy_device(float* to, const float* from, std::size_t count, cudaStream_t stream);

struct CudaGpt2Model::State {
  State(const Model& model, const Gpt2Options& options, MemoryLedger& ledger, Gpt2Layout layout);

  // gpt2_cuda_forward.cpp
  void embedding_forward(ParamViews params);
  void block_forward(std::size_t layer, ParamViews params, bool recomputing);
  void final_norm_forward(std::size_t layer, ParamViews params);
  void head_forward(ParamViews params);
  // gpt2_cuda_backward.cpp
  void embedding_backward(GradViews grads);
  void block_backward(std::size_t layer, ParamViews params, GradViews grads);
  void final_norm_backward(std::size_t layer, ParamViews params, GradViews grads);
  void head_backward(std::size_t layer, ParamViews params, GradViews grads, float scale);

  // An activation (counted at the plan's activation dtype) and an fp32 buffer in any precision,
  // as Gpt2Model::State's. Device memory is zero-filled on allocation, so zeroed_working is working.
  HeldDeviceBuffer activation(Component component, std::size_t count) { return {ledger, component, count, held()}; }
  HeldDeviceBuffer fp32(Component component, std::size_t count) { return {ledger, component, count, HeldAs{4}}; }
  HeldDeviceBuffer working(std::size_t count) { return activation(Component::ActivationWorking, count); }
  HeldDeviceBuffer zeroed_working(std::size_t count) { return working(count); }
  HeldAs held() const { return {std::size_t(options.activation_element_bytes)}; }
  bool sixteen_bit() const { return options.activation_element_bytes < 4; }
  const kernels::cuda::BlasHandles& handles() const { return *blas; }

  const Model& model;
  Gpt2Options options;
  MemoryLedger& ledger;
  Gpt2Dims dims;
  std::vector<Gpt2Role> roles;
  Gpt2Corpus corpus;
  cudaStream_t stream = nullptr;  // the legacy default stream (see gpt2_cuda_model.hpp)
  std::unique_ptr<kernels::cuda::BlasHandles> blas;
  Bytes workspace_bytes = 0;
  cuda_memory_detail::LedgerCharge workspace_charge;  // LibraryWorkspace
  DeviceBuffer<std::int32_t> tokens, targets;         // kept by the embedding and the head
  std::vector<HeldDeviceBuffer> outputs;              // per layer: its output [rows, C] (not the head's)
  std::vector<CudaBlockActivations> blocks;           // per layer (used by blocks only)
  HeldDeviceBuffer lnf_mean, lnf_rstd;
  HeldDeviceBuffer logits, probs, losses;  // the head's
  HeldDeviceBuffer dresidual;              // gradient of the residual stream during backward
  double loss = 0;
};

}  // namespace zerolens::exec
