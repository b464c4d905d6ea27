// `calibrate --device cuda`'s GPU side directly (one rank, MPI started as a singleton): without a
// device it refuses naming the flag and the probe's reason; with one, every figure is measured.
#include <gtest/gtest.h>

#include <string>

#include "cuda_exec_test_support.hpp"
#include "exec/cuda/calibrate_gpu.hpp"
#include "sim/core/error.hpp"

namespace zerolens::exec {
namespace {

TEST(CalibrateGpu, WithoutADeviceItNamesTheFlagAndTheProbesReason) {
  REQUIRE_NO_CUDA_DEVICE();
  try {
    make_gpu_calibrator();
    FAIL() << "no exception";
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "--device cuda");
    EXPECT_NE(std::string(error.what()).find(testing::cuda_devices().reason), std::string::npos)
        << error.what();
  }
}

TEST(CalibrateGpu, MeasuresEveryFigureOnThisGpu) {
  REQUIRE_CUDA_DEVICE();
  const auto calibrator = make_gpu_calibrator();
  CalibrateOptions options = quick_calibrate_options();
  options.gemm_sizes = {256, 1024};
  options.repeats = 1;
  options.gpu_copy_bytes = Bytes{64} << 20;
  options.gpu_transfer_bytes = Bytes{16} << 20;
  const GpuCalibration gpu = calibrator->measure(options);
  cudaDeviceProp properties{};
  ASSERT_EQ(cudaGetDeviceProperties(&properties, 0), cudaSuccess);
  EXPECT_EQ(gpu.name, properties.name);
  EXPECT_GT(gpu.memory_bytes, gpu.free_bytes);
  ASSERT_EQ(gpu.gemm_fp32.size(), 2u);
  ASSERT_EQ(gpu.gemm_bf16.size(), 2u);
  EXPECT_GT(gpu.gemm_fp32[1].flops_per_second, 0);
  EXPECT_GT(gpu.gemm_bf16[1].flops_per_second, 0);
  EXPECT_EQ(gpu.copy_bytes, Bytes{64} << 20);
  EXPECT_GT(gpu.hbm_bytes_per_second, 0);
  EXPECT_GT(gpu.h2d_bytes_per_second, 0);
  EXPECT_GT(gpu.d2h_bytes_per_second, 0);
  EXPECT_TRUE(calibrator->measure_collectives({4096}).empty());  // one rank: none
}

}  // namespace
}  // namespace zerolens::exec
