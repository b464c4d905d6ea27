#include "kernels/cuda/runtime.hpp"

#include <algorithm>
#include <stdexcept>

namespace zerolens::kernels::cuda {

void check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(status) + " (" +
                           cudaGetErrorName(status) + ")");
}

void check_launch(const char* kernel) {
  check(cudaGetLastError(), (std::string("launch of ") + kernel).c_str());
}

DeviceProbe probe_devices() {
  DeviceProbe probe;
  const cudaError_t status = cudaGetDeviceCount(&probe.count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the error so later calls do not report it again
    probe.count = 0;
    probe.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status) + " (" +
                   cudaGetErrorName(status) + ")";
  } else if (probe.count == 0) {
    probe.reason = "cudaGetDeviceCount: 0 devices";
  }
  return probe;
}

unsigned grid_for(std::size_t count, unsigned block) {
  // 65535 * 64 blocks is far beyond what saturates any GPU; the kernels grid-stride past it.
  constexpr std::size_t max_blocks = std::size_t(1) << 22;
  return unsigned(std::clamp<std::size_t>((count + block - 1) / block, 1, max_blocks));
}

}  // namespace zerolens::kernels::cuda
