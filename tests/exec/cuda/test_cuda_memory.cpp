// Device and pinned buffers charged to the ledger, and driver memory beyond the ledger as overhead.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "cuda_exec_test_support.hpp"
#include "exec/cuda/cuda_memory.hpp"

namespace zerolens::exec {
namespace {

constexpr Bytes kMiB = Bytes(1) << 20;

// What an exception's message says, or "" when none was thrown.
template <typename F>
std::string thrown_message(F&& f) {
  try {
    f();
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "";
}

TEST(DriverMemory, UnaccountedGrowthIsTheDriversGrowthBeyondTheLedgers) {
  const DriverMemorySnapshot before{.free = 70 * kMiB, .total = 80 * kMiB, .ledger_gpu = 4 * kMiB};
  // The driver handed out 30 MiB more, the ledger accounts 24 of them: 6 MiB of workspace.
  const DriverMemorySnapshot after{.free = 40 * kMiB, .total = 80 * kMiB, .ledger_gpu = 28 * kMiB};
  EXPECT_EQ(before.used(), 10 * kMiB);
  EXPECT_EQ(unaccounted_growth(before, after), 6 * kMiB);
  // Freed memory the driver has not taken back yet is not a negative overhead.
  EXPECT_EQ(unaccounted_growth(after, before), 0);
}

TEST(DriverMemory, TheContextIsTheGrowthFromAnIdleDevice) {
  const DriverMemorySnapshot idle{.free = 80 * kMiB, .total = 80 * kMiB, .ledger_gpu = 0};
  const DriverMemorySnapshot first{.free = 79 * kMiB, .total = 80 * kMiB, .ledger_gpu = 0};
  MemoryLedger ledger;
  EXPECT_EQ(charge_unaccounted_growth(ledger, Component::CudaContext, idle, first), kMiB);
  EXPECT_EQ(ledger.current(Device::Gpu, Component::CudaContext), kMiB);
  EXPECT_EQ(ledger.current_categories(Device::Gpu)[std::size_t(Category::Overhead)], kMiB);
  EXPECT_EQ(ledger.current(Device::Cpu), 0);
}

TEST(DriverMemory, OnlyOverheadComponentsTakeDriverMemory) {
  MemoryLedger ledger;
  const DriverMemorySnapshot snapshot{.free = 1, .total = 2, .ledger_gpu = 0};
  EXPECT_THROW(charge_unaccounted_growth(ledger, Component::ReduceBucket, snapshot, snapshot), std::invalid_argument);
  EXPECT_EQ(charge_unaccounted_growth(ledger, Component::LibraryWorkspace, snapshot, snapshot), 0);
  EXPECT_EQ(ledger.current(Device::Gpu), 0);
}

TEST(CudaMemory, EmptyBuffersNeedNoDeviceAndChargeNothing) {
  MemoryLedger ledger;
  DeviceBuffer<float> device(ledger, Component::ParamsFull, 0);
  PinnedHostBuffer<float> pinned(ledger, Component::OffloadStaging, 0);
  EXPECT_EQ(device.data(), nullptr);
  EXPECT_EQ(pinned.size(), 0u);
  DeviceBuffer<float> moved = std::move(device);
  moved.reset();
  EXPECT_EQ(ledger.current(Device::Gpu), 0);
  EXPECT_EQ(ledger.current(Device::Cpu), 0);
  std::vector<float> wrong(3);
  EXPECT_THROW(moved.copy_from_host(wrong), std::length_error);
}

TEST(CudaMemory, WithoutADeviceAllocationsThrowNamingTheCallAndChargeNothing) {
  REQUIRE_NO_CUDA_DEVICE();
  MemoryLedger ledger;
  const std::string device = thrown_message([&] { DeviceBuffer<float>(ledger, Component::ParamsFull, 1024); });
  EXPECT_EQ(device.rfind("cudaMalloc failed: ", 0), 0u) << device;
  const std::string pinned =
      thrown_message([&] { PinnedHostBuffer<float>(ledger, Component::OptimizerStatePartition, 1024); });
  EXPECT_EQ(pinned.rfind("cudaHostAlloc failed: ", 0), 0u) << pinned;
  const std::string snapshot = thrown_message([&] { DriverMemorySnapshot::take(ledger); });
  EXPECT_EQ(snapshot.rfind("cudaMemGetInfo failed: ", 0), 0u) << snapshot;
  EXPECT_EQ(ledger.current(Device::Gpu), 0);
  EXPECT_EQ(ledger.peak(Device::Gpu), 0);
  EXPECT_EQ(ledger.current(Device::Cpu), 0);
}

TEST(CudaMemory, DeviceBufferIsChargedForItsLifeAndHoldsWhatIsCopiedIn) {
  REQUIRE_CUDA_DEVICE();
  MemoryLedger ledger;
  {
    DeviceBuffer<std::uint16_t> buffer(ledger, Component::GradsPartition, 1000);
    EXPECT_EQ(ledger.current(Device::Gpu, Component::GradsPartition), 2000);
    std::vector<std::uint16_t> host(1000, 7);
    buffer.copy_to_host(host);
    EXPECT_EQ(host, std::vector<std::uint16_t>(1000, 0)) << "zero-filled as TrackedBuffer is";
    std::iota(host.begin(), host.end(), std::uint16_t(1));
    buffer.copy_from_host(host);
    DeviceBuffer<std::uint16_t> moved = std::move(buffer);  // one charge, moved with the memory
    EXPECT_EQ(ledger.current(Device::Gpu), 2000);
    std::vector<std::uint16_t> back(1000);
    moved.copy_to_host(back);
    EXPECT_EQ(back, host);
  }
  EXPECT_EQ(ledger.current(Device::Gpu), 0);
  EXPECT_EQ(ledger.peak(Device::Gpu), 2000);
}

TEST(CudaMemory, PinnedHostBufferIsChargedToTheCpu) {
  REQUIRE_CUDA_DEVICE();
  MemoryLedger ledger;
  PinnedHostBuffer<float> pinned(ledger, Component::OptimizerStatePartition, 256);
  EXPECT_EQ(ledger.current(Device::Cpu, Component::OptimizerStatePartition), 1024);
  EXPECT_EQ(ledger.current(Device::Gpu), 0);
  EXPECT_EQ(pinned[255], 0.0f);
  pinned[255] = 3.5f;
  EXPECT_EQ(pinned.span().back(), 3.5f);
  pinned.reset();
  EXPECT_EQ(ledger.current(Device::Cpu), 0);
}

TEST(CudaMemory, DriverSeesLedgerBuffersAsAccountedAndRawAllocationsAsNot) {
  REQUIRE_CUDA_DEVICE();
  MemoryLedger ledger;
  const auto before = DriverMemorySnapshot::take(ledger);
  DeviceBuffer<float> tracked(ledger, Component::ParamsFull, std::size_t(64 * kMiB / 4));
  const auto with_tracked = DriverMemorySnapshot::take(ledger);
  EXPECT_LT(unaccounted_growth(before, with_tracked), 4 * kMiB) << "allocation rounding only";
  void* raw = nullptr;  // a library workspace the ledger does not know
  check_cuda(cudaMalloc(&raw, std::size_t(64 * kMiB)), "cudaMalloc");
  const auto with_raw = DriverMemorySnapshot::take(ledger);
  cudaFree(raw);
  EXPECT_GE(unaccounted_growth(with_tracked, with_raw), 64 * kMiB);
}

}  // namespace
}  // namespace zerolens::exec
