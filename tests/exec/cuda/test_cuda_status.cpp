// Status checks name the failing call and the library's error string; the probe never throws.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "exec/cuda/cuda_status.hpp"

namespace zerolens::exec {
namespace {

TEST(CudaStatus, FailuresNameTheCallAndTheLibrarysErrorString) {
  try {
    check_cuda(cudaErrorMemoryAllocation, "cudaMalloc");
    FAIL() << "no exception";
  } catch (const std::runtime_error& error) {
    EXPECT_EQ(std::string(error.what()),
              std::string("cudaMalloc failed: ") + cudaGetErrorString(cudaErrorMemoryAllocation) +
                  " (cudaErrorMemoryAllocation)");
  }
  try {
    check_nccl(ncclInvalidArgument, "ncclAllReduce");
    FAIL() << "no exception";
  } catch (const std::runtime_error& error) {
    const std::string expected = std::string("ncclAllReduce failed: ") + ncclGetErrorString(ncclInvalidArgument);
    EXPECT_EQ(std::string(error.what()).rfind(expected, 0), 0u) << error.what();
  }
  EXPECT_NO_THROW(check_cuda(cudaSuccess, "cudaMalloc"));
  EXPECT_NO_THROW(check_nccl(ncclSuccess, "ncclAllReduce"));
}

TEST(CudaStatus, ProbeNeverThrowsAndExplainsAnEmptyCount) {
  const CudaDeviceProbe probe = probe_cuda_devices();
  if (probe.count == 0) {
    EXPECT_NE(probe.reason.find("cudaGetDeviceCount"), std::string::npos) << probe.reason;
  } else {
    EXPECT_TRUE(probe.reason.empty()) << probe.reason;
  }
}

}  // namespace
}  // namespace zerolens::exec
