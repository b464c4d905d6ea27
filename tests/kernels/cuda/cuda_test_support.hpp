#pragma once
// Shared helpers of the GPU kernel tests: the device check every GPU test starts with (copies go
// through DeviceBuffer's upload and download). The float64 references and tolerance checks are the
// CPU tests' own (kernel_test_support.hpp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../kernel_test_support.hpp"
#include "kernels/cuda/runtime.hpp"

namespace zerolens::kernels::cuda::testing {

using namespace zerolens::kernels::testing;  // random_floats, to_double, expect_close, ...

// Records a skip with the reason when this process sees no CUDA device. Called from the fixture's
// SetUp, a skip there keeps the test body from running.
inline void require_cuda_device() {
  static const DeviceProbe probe = probe_devices();
  if (probe.count == 0) GTEST_SKIP() << "no CUDA device: " << probe.reason;
}

// Every GPU test: skipped without a device; fails if a kernel left an asynchronous error behind.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override { require_cuda_device(); }
  void TearDown() override {
    if (IsSkipped()) return;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "an asynchronous CUDA error";
  }
};

}  // namespace zerolens::kernels::cuda::testing
