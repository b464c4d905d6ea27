#pragma once
// The cuBLAS and cuBLASLt handles of one device plus the GEMM workspace they share, owned together
// (RAII) so an executor can account the workspace as its own memory category.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace zerolens::kernels::cuda {

// Throws std::runtime_error "<call>: <cuBLAS status string> (<status name>)" unless success.
void check_blas(cublasStatus_t status, const char* call);

// Creates the handles on the current device and a workspace of `workspace_bytes` (cudaMalloc),
// given to both libraries. GEMMs issued through it run on the stream each call passes; calls that
// use one BlasHandles must not overlap on different streams (they share the workspace). Math is
// plain fp32 (no TF32), so fp32 GEMMs match the CPU reference closely.
class BlasHandles {
 public:
  static constexpr std::size_t default_workspace_bytes = std::size_t(32) << 20;

  explicit BlasHandles(std::size_t workspace_bytes = default_workspace_bytes);
  BlasHandles(const BlasHandles&) = delete;
  BlasHandles& operator=(const BlasHandles&) = delete;
  ~BlasHandles();

  // cuBLAS with its stream set to `stream` (each call sets it: streams may change between calls).
  cublasHandle_t blas(cudaStream_t stream) const;
  cublasLtHandle_t lt() const { return lt_; }
  void* workspace() const { return workspace_; }
  std::size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  void release() noexcept;

  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
};

}  // namespace zerolens::kernels::cuda
