// The accounting allocator: current and peak bytes per device, the breakdown at the peak, and
// buffers that record their own life.
#include <gtest/gtest.h>

#include "exec/memory/memory_ledger.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens::exec {
namespace {

TEST(MemoryLedger, PeakAndItsBreakdownWorkedByHand) {
  MemoryLedger ledger;
  ledger.allocate(Device::Gpu, Component::ParamsFull, 100);
  ledger.allocate(Device::Gpu, Component::GatheredParams, 50);   // 150: the peak
  ledger.release(Device::Gpu, Component::GatheredParams, 50);    // 100
  ledger.allocate(Device::Gpu, Component::ActivationsStored, 40);  // 140 < 150
  ledger.allocate(Device::Cpu, Component::OptimizerStatePartition, 7);
  EXPECT_EQ(ledger.current(Device::Gpu), 140);
  EXPECT_EQ(ledger.peak(Device::Gpu), 150);
  const CategoryBytes at_peak = ledger.categories_at_peak(Device::Gpu);
  EXPECT_EQ(at_peak[std::size_t(Category::Params)], 100);
  EXPECT_EQ(at_peak[std::size_t(Category::Buffers)], 50);
  EXPECT_EQ(at_peak[std::size_t(Category::Activations)], 0);
  EXPECT_EQ(ledger.current_categories(Device::Gpu)[std::size_t(Category::Activations)], 40);
  EXPECT_EQ(ledger.peak(Device::Cpu), 7);
  EXPECT_EQ(ledger.peak(Device::Nvme), 0);
  ledger.reset_peaks();
  EXPECT_EQ(ledger.peak(Device::Gpu), 140);
  EXPECT_THROW(ledger.release(Device::Gpu, Component::GatheredParams, 1), std::logic_error);
}

TEST(TrackedBuffer, AccountsForItsWholeLifeAndMoves) {
  MemoryLedger ledger;
  {
    TrackedBuffer<float> a(ledger, Device::Gpu, Component::ReduceBucket, 1000);
    EXPECT_EQ(a.bytes(), 4000);
    EXPECT_EQ(ledger.current(Device::Gpu, Component::ReduceBucket), 4000);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % 64, 0u);
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], 0.0f);  // zero-initialised
    TrackedBuffer<float> b = std::move(a);
    EXPECT_EQ(a.size(), 0u);
    EXPECT_EQ(ledger.current(Device::Gpu), 4000);  // moved, not copied
    TrackedBuffer<std::uint16_t> c(ledger, Device::Cpu, Component::NvmeSwapBuffers, 3, 4096);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c.data()) % 4096, 0u);
    EXPECT_EQ(ledger.current(Device::Cpu), 6);
    b.reset();
    EXPECT_EQ(ledger.current(Device::Gpu), 0);
  }
  EXPECT_EQ(ledger.current(Device::Cpu), 0);
  EXPECT_EQ(ledger.peak(Device::Gpu), 4000);
}

}  // namespace
}  // namespace zerolens::exec
