#pragma once
// The device check the executor's GPU tests start with: without a CUDA device they skip, saying why.
#include <gtest/gtest.h>

#include "exec/cuda/cuda_status.hpp"

namespace zerolens::exec::testing {

inline const CudaDeviceProbe& cuda_devices() {
  static const CudaDeviceProbe probe = probe_cuda_devices();
  return probe;
}

// GTEST_SKIP only leaves the function it is in: call as `REQUIRE_CUDA_DEVICE();` in a test body or SetUp.
#define REQUIRE_CUDA_DEVICE()                                                                        \
  do {                                                                                               \
    if (::zerolens::exec::testing::cuda_devices().count == 0)                                        \
      GTEST_SKIP() << "no CUDA device: " << ::zerolens::exec::testing::cuda_devices().reason;         \
  } while (0)

// The failure-path tests (what happens without a device) only mean something where there is none.
#define REQUIRE_NO_CUDA_DEVICE()                                                                     \
  do {                                                                                               \
    if (::zerolens::exec::testing::cuda_devices().count > 0)                                         \
      GTEST_SKIP() << "a CUDA device is present; this checks the behaviour without one";             \
  } while (0)

}  // namespace zerolens::exec::testing
