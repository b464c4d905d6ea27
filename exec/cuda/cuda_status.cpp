#include "exec/cuda/cuda_status.hpp"

#include <stdexcept>

namespace zerolens::exec {

void check_cuda(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  throw std::runtime_error(std::string(call) + " failed: " + cudaGetErrorString(status) + " (" +
                           cudaGetErrorName(status) + ")");
}

void check_nccl(ncclResult_t status, const char* call) {
  if (status == ncclSuccess) return;
  std::string message = std::string(call) + " failed: " + ncclGetErrorString(status);
  // NCCL's own account of the last failure on this thread (e.g. "Duplicate GPU detected"), if any.
  const char* detail = ncclGetLastError(nullptr);
  if (detail != nullptr && *detail != '\0') message += std::string(" (") + detail + ")";
  throw std::runtime_error(message);
}

CudaDeviceProbe probe_cuda_devices() {
  CudaDeviceProbe probe;
  const cudaError_t status = cudaGetDeviceCount(&probe.count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear it so later calls do not report it again
    probe.count = 0;
    probe.reason = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(status) + " (" +
                   cudaGetErrorName(status) + ")";
  } else if (probe.count == 0) {
    probe.reason = "cudaGetDeviceCount found 0 devices";
  }
  return probe;
}

}  // namespace zerolens::exec
