#pragma once
// Status checks of the executor's CUDA and NCCL calls, and a device probe. Every failure becomes a
// std::runtime_error naming the call and the library's own error string, so a rank's message says
// which call failed and why.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

namespace zerolens::exec {

// Throws std::runtime_error "<call> failed: <cudaGetErrorString> (<error name>)" unless cudaSuccess.
void check_cuda(cudaError_t status, const char* call);
// Throws std::runtime_error "<call> failed: <ncclGetErrorString>[ (<ncclGetLastError>)]" unless ncclSuccess.
void check_nccl(ncclResult_t status, const char* call);

// How many CUDA devices this process sees; never throws. count == 0 when there is no device or no
// driver, `reason` then names the failing call and its error string.
struct CudaDeviceProbe {
  int count = 0;
  std::string reason;
};
CudaDeviceProbe probe_cuda_devices();

}  // namespace zerolens::exec
