#include "kernels/cuda/blas.hpp"

#include <stdexcept>
#include <string>

#include "kernels/cuda/runtime.hpp"

namespace zerolens::kernels::cuda {

void check_blas(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string(call) + ": " + cublasGetStatusString(status) + " (" +
                           cublasGetStatusName(status) + ")");
}

BlasHandles::BlasHandles(std::size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  // A constructor that throws runs no destructor: release what was made so far by hand.
  try {
    check_blas(cublasCreate(&blas_), "cublasCreate");
    check_blas(cublasLtCreate(&lt_), "cublasLtCreate");
    if (workspace_bytes_ > 0)
      check(cudaMalloc(&workspace_, workspace_bytes_), "cudaMalloc workspace");
    check_blas(cublasSetWorkspace(blas_, workspace_, workspace_bytes_), "cublasSetWorkspace");
    check_blas(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");  // no TF32
  } catch (...) {
    release();
    throw;
  }
}

BlasHandles::~BlasHandles() { release(); }

void BlasHandles::release() noexcept {
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  if (blas_ != nullptr) cublasDestroy(blas_);
  workspace_ = nullptr;
  lt_ = nullptr;
  blas_ = nullptr;
}

cublasHandle_t BlasHandles::blas(cudaStream_t stream) const {
  check_blas(cublasSetStream(blas_, stream), "cublasSetStream");
  // cublasSetStream resets the user workspace to the default pool: give ours back.
  check_blas(cublasSetWorkspace(blas_, workspace_, workspace_bytes_), "cublasSetWorkspace");
  return blas_;
}

}  // namespace zerolens::kernels::cuda
