// DeepSpeed's estimators, checked against values worked by hand from their published formulas
// (deepspeed/runtime/zero/stage_1_and_2.py and stage3.py).
#include <gtest/gtest.h>

#include "sim/plan/deepspeed_estimators.hpp"

namespace zerolens {
namespace {

TEST(DeepSpeedEstimators, Zero2WorkedExample) {
  // 1e9 parameters, 1 node x 8 GPUs, additional_buffer_factor 1.5.
  const auto offload = estimate_zero2(1'000'000'000, 8, 1, true);
  EXPECT_EQ(offload.gpu_bytes, 2'000'000'000);
  EXPECT_EQ(offload.cpu_bytes, 48'000'000'000);  // 1e9 * max(4*8, 16) * 1.5
  const auto resident = estimate_zero2(1'000'000'000, 8, 1, false);
  EXPECT_EQ(resident.gpu_bytes, 4'250'000'000);  // 2e9 + 18e9 / 8
  EXPECT_EQ(resident.cpu_bytes, 48'000'000'000);  // 1e9 * 4 * 8 * 1.5
}

TEST(DeepSpeedEstimators, Zero3WorkedExample) {
  const Elements total = 1'000'000'000, largest = 100'000'000;
  EXPECT_EQ(estimate_zero3(total, largest, 8, 1, true, true, true).gpu_bytes, 400'000'000);
  EXPECT_EQ(estimate_zero3(total, largest, 8, 1, true, true, true).cpu_bytes, 27'000'000'000);
  EXPECT_EQ(estimate_zero3(total, largest, 8, 1, true, true, false).cpu_bytes, 48'000'000'000);  // max(32, 18)
  EXPECT_EQ(estimate_zero3(total, largest, 8, 1, true, false, true).gpu_bytes, 650'000'000);
  EXPECT_EQ(estimate_zero3(total, largest, 8, 1, true, false, true).cpu_bytes, 24'000'000'000);
  EXPECT_EQ(estimate_zero3(total, largest, 8, 1, false, false, false).gpu_bytes, 2'650'000'000);
  EXPECT_EQ(estimate_zero3(total, largest, 8, 1, false, false, true).cpu_bytes, 4'800'000'000);
  // Two nodes halve the per-node CPU figure (gpus_factor = 1 / nodes).
  EXPECT_EQ(estimate_zero3(total, largest, 8, 2, true, true, true).cpu_bytes, 13'500'000'000);
}

TEST(DeepSpeedEstimators, TablesHaveDeepSpeedsRows) {
  EXPECT_EQ(deepspeed_estimate_table(2, 1000, 100, 1, 1).size(), 2u);
  const auto rows = deepspeed_estimate_table(3, 1000, 100, 1, 1);
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[0].offload_param, OffloadDevice::Cpu);
  EXPECT_TRUE(rows[0].zero_init);
  EXPECT_EQ(rows[5].offload_optimizer, OffloadDevice::None);
  EXPECT_FALSE(rows[5].zero_init);
}

}  // namespace
}  // namespace zerolens
