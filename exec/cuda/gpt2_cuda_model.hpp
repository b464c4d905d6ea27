#pragma once
// GPT-2 on the GPU: Gpt2Model's layer steps (exec/model/gpt2_layers.hpp) on kernels/cuda's kernels,
// for a ZeRO engine whose device buffers live in a CudaMemorySpace, so the ParamViews and GradViews
// it is handed hold DEVICE pointers (fp32). Same architecture check, initial weights and synthetic
// corpus (exec/model/gpt2_shape.hpp), and the same activation bookkeeping: every activation is a
// device buffer charged to the ledger under the component, element count and bytes per element
// (HeldAs) that Gpt2Model charges for it, allocated and freed in the same order, so the ledger's
// activation figures are the CPU model's and compare with sim's plan the same way.
//
// Everything runs on the legacy default stream, the stream CudaMemorySpace's copies and kernels
// use, so no call needs a synchronisation to see the engine's buffers or to hand it gradients;
// loss() is read back synchronously after the head's forward. Activations come from the memory
// space the ledger places Gpu buffers in (the device communicator's caching allocator), else each
// is a cudaMalloc of its own.
//
// The cuBLAS/cuBLASLt handles and their GEMM workspace (kernels::cuda::BlasHandles) are created in
// the constructor on the current device; the driver memory they take (measured with
// DriverMemorySnapshot around their creation, at least the workspace's size) is charged under
// LibraryWorkspace for the model's life. A caller charging library memory itself must not count
// these again. Plain C++: g++ code includes it.
#include <cstdint>
#include <memory>

#include "exec/memory/memory_ledger.hpp"
#include "exec/model/gpt2_shape.hpp"
#include "exec/model/layer_model.hpp"
#include "sim/model/model.hpp"

namespace zerolens::exec {

class CudaGpt2Model final : public LayerModel {
 public:
  // Throws InputError as Gpt2Model does (the same check, before any CUDA call), then
  // std::runtime_error naming the CUDA or cuBLAS call that failed (e.g. without a device).
  CudaGpt2Model(const Model& model, const Gpt2Options& options, MemoryLedger& ledger);
  ~CudaGpt2Model() override;
  CudaGpt2Model(const CudaGpt2Model&) = delete;
  CudaGpt2Model& operator=(const CudaGpt2Model&) = delete;

  // Host values (the engine uploads them), equal to Gpt2Model's.
  void init_tensor(std::int32_t tensor, std::span<float> values) const override;
  void load_batch(std::int64_t first_sample, std::int64_t count) override;
  // params and grads: device pointers.
  void forward(std::size_t layer, ParamViews params) override;
  void recompute(std::size_t layer, ParamViews params) override;
  void backward(std::size_t layer, ParamViews params, GradViews grads, float scale) override;
  double loss() const override;

  // What the constructor charged under LibraryWorkspace (the cuBLAS handles and workspace).
  Bytes library_workspace_bytes() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace zerolens::exec
