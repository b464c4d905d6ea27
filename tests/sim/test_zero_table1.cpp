// Model-state memory against the ZeRO paper (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations
// Toward Training Trillion Parameter Models", Table 1): per-device GB (1e9 bytes) of mixed-precision
// Adam (K = 12) for Psi parameters over Nd data-parallel ranks: baseline 16 Psi, P_os 4 Psi + 12 Psi/Nd,
// P_os+g 2 Psi + 14 Psi/Nd, P_os+g+p 16 Psi/Nd.
#include <gtest/gtest.h>

#include "test_helpers.hpp"

namespace zerolens {
namespace {

struct Table1Row {
  double psi;
  int nd;
  double baseline, os, os_g, os_g_p;  // the paper's printed values, GB
};

// Rows of Table 1 as printed (7.5B, 128B and 1T models).
const Table1Row kRows[] = {
    {7.5e9, 1, 120, 120, 120, 120},      {7.5e9, 4, 120, 52.5, 41.3, 30},
    {7.5e9, 16, 120, 35.6, 21.6, 7.5},   {7.5e9, 64, 120, 31.4, 16.6, 1.88},
    {7.5e9, 256, 120, 30.4, 15.4, 0.47}, {7.5e9, 1024, 120, 30.1, 15.1, 0.12},
    {128e9, 64, 2048, 536, 284, 32},     {128e9, 1024, 2048, 513, 257, 2},
    {1e12, 64, 16000, 4187, 2218, 250},  {1e12, 1024, 16000, 4011, 2013, 15.6},
};

double gpu_gb(const Model& model, int stage, int nd) {
  const Plan plan = testing::plan_of(model, testing::mixed_adam(stage), nd, 8, /*model_states_only=*/true);
  return double(plan.device(Device::Gpu).peak) / 1e9;
}

// The paper rounds to 3 significant digits.
void expect_paper_value(double ours, double printed) {
  EXPECT_NEAR(ours, printed, printed * 0.006 + 0.005) << "printed " << printed;
}

TEST(ZeroTable1, ReproducesEveryPrintedRow) {
  for (const auto& row : kRows) {
    SCOPED_TRACE("psi=" + std::to_string(row.psi) + " nd=" + std::to_string(row.nd));
    // Power-of-two tensors (>= 1024 elements) keep the partitions exact for every Nd in the table;
    // about a thousand of them keeps the schedule small.
    Elements per_tensor = Elements(1) << 20;
    while (double(per_tensor) * 2000 < row.psi) per_tensor *= 2;
    const Model model = testing::flat_model(int(row.psi / double(per_tensor)) + 1, per_tensor);
    const double scale = row.psi / double(model.parameter_count());
    expect_paper_value(gpu_gb(model, 0, row.nd) * scale, row.baseline);
    expect_paper_value(gpu_gb(model, 1, row.nd) * scale, row.os);
    expect_paper_value(gpu_gb(model, 2, row.nd) * scale, row.os_g);
    expect_paper_value(gpu_gb(model, 3, row.nd) * scale, row.os_g_p);
  }
}

TEST(ZeroTable1, SevenPointFiveBillionOnSixtyFourRanksIsExact) {
  // 75 tensors of 1e8 elements = 7.5e9 parameters; 1e8 is divisible by 64, so no padding.
  const Model model = testing::flat_model(75, 100'000'000);
  ASSERT_EQ(model.parameter_count(), 7'500'000'000);
  const Bytes psi = 7'500'000'000;
  auto peak = [&](int stage) {
    return testing::plan_of(model, testing::mixed_adam(stage), 64, 8, true).device(Device::Gpu).peak;
  };
  EXPECT_EQ(peak(0), 16 * psi);                       // 120 GB
  EXPECT_EQ(peak(1), 4 * psi + 12 * psi / 64);        // 31.4 GB
  EXPECT_EQ(peak(2), 2 * psi + 14 * psi / 64);        // 16.6 GB
  EXPECT_EQ(peak(3), 16 * psi / 64);                  // 1.875 GB
}

TEST(ZeroTable1, CategoriesSplitAsThePaperDescribes) {
  const Model model = testing::flat_model(75, 100'000'000);
  const Bytes psi = 7'500'000'000;
  const Plan plan = testing::plan_of(model, testing::mixed_adam(2), 64, 8, true);
  const auto& gpu = plan.device(Device::Gpu);
  EXPECT_EQ(gpu.categories[std::size_t(Category::Params)], 2 * psi);
  EXPECT_EQ(gpu.categories[std::size_t(Category::Grads)], 2 * psi / 64);
  EXPECT_EQ(gpu.categories[std::size_t(Category::MasterParams)], 4 * psi / 64);
  EXPECT_EQ(gpu.categories[std::size_t(Category::OptimizerStates)], 8 * psi / 64);
  EXPECT_EQ(gpu.categories[std::size_t(Category::Activations)], 0);
  EXPECT_EQ(gpu.categories[std::size_t(Category::Buffers)], 0);
  EXPECT_EQ(gpu.categories[std::size_t(Category::Overhead)], 0);
}

TEST(ZeroTable1, OffloadMovesOptimizerStatesToTheHost) {
  // ZeRO-Offload (Ren et al. 2021): fp16 params stay on the GPU; fp32 master, momentum, variance and
  // the fp32 gradient partition (16 bytes per parameter of the partition) live in host memory.
  const Model model = testing::flat_model(64, 1 << 20);
  const Bytes psi = model.parameter_count();
  TrainingConfig config = testing::mixed_adam(2);
  config.zero.offload_optimizer.device = OffloadDevice::Cpu;
  const Plan plan = testing::plan_of(model, config, 8, 8, true);
  EXPECT_EQ(plan.device(Device::Gpu).peak, 2 * psi);
  EXPECT_EQ(plan.device(Device::Cpu).peak_per_rank, 16 * psi / 8);
  EXPECT_EQ(plan.device(Device::Cpu).peak, 16 * psi);  // 8 ranks share the node
}

}  // namespace
}  // namespace zerolens
