// The engine with its device buffers in a memory space the host cannot address (tests/exec/
// guarded_memory.hpp), under mpirun (1, 2, 4 ranks), against the same run in host memory: every
// stage, precision and offload gives the same bits (losses, norms, parameters, checkpoint shards),
// the same ledger figures and the same counted traffic. The host faults on the space's addresses,
// so finishing at all shows the engine reaches device numbers only through exec/memory/numbers.hpp;
// that is the seam a CUDA memory space plugs into.
#include <gtest/gtest.h>

#include <bit>
#include <vector>

#include "engine_variants.hpp"
#include "exec/memory/caching_memory_space.hpp"
#include "guarded_memory.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens::exec {
namespace {

using testing::Offload;
using testing::Variant;

constexpr int kSteps = 3;

struct Observed {
  std::vector<StepReport> reports;
  std::vector<float> params;
  RankShard shard;
  std::array<Bytes, kDeviceCount> peaks{};
  std::array<CategoryBytes, kDeviceCount> highs{};
  Bytes scratch_peak = 0;
  std::array<Bytes, kOpKindCount> collective_bytes{};
  LinkBytes links;
};

Observed train(const Variant& v, MemorySpace* space, const EngineOptions& options) {
  Communicator& comm = testing::world_communicator();
  const Plan plan = testing::variant_plan(v, comm.size());
  testing::ToyLayerModel toy(testing::kVariantShape);
  std::optional<testing::HostStagedModel> staged;
  if (space) staged.emplace(toy, *space);
  LayerModel& model = space ? static_cast<LayerModel&>(*staged) : toy;
  MemoryLedger ledger;
  if (space) ledger.place(Device::Gpu, space);
  std::array<Bytes, kOpKindCount> before{};
  for (int k = 0; k < kOpKindCount; ++k) before[std::size_t(k)] = comm.count(OpKind(k)).bytes;
  ZeroEngine engine(plan, comm, model, ledger, options);
  Observed observed;
  for (int step = 0; step < kSteps; ++step) observed.reports.push_back(engine.step(step));
  for (int k = 0; k < kOpKindCount; ++k) {
    observed.collective_bytes[std::size_t(k)] =
        comm.count(OpKind(k)).bytes - before[std::size_t(k)];
  }
  for (const Device device : {Device::Gpu, Device::Cpu, Device::Nvme}) {
    observed.peaks[std::size_t(device)] = ledger.peak(device);
    observed.highs[std::size_t(device)] = ledger.category_highs(device);
  }
  observed.scratch_peak = ledger.scratch_peak(Device::Gpu);
  observed.links = engine.link_bytes();
  observed.params = engine.full_parameters();
  observed.shard = engine.checkpoint_shard();
  return observed;
}

std::vector<Variant> seam_variants() {
  std::vector<Variant> variants;
  for (const Precision precision : {Precision::Fp32, Precision::Bf16, Precision::Fp16}) {
    for (int stage = 0; stage <= 3; ++stage) {
      variants.push_back(
          {.stage = stage, .precision = precision, .grad_accumulation = 2, .clipping = 0.05});
      if (stage == 0) continue;
      variants.push_back({.stage = stage, .precision = precision, .offload = Offload::Optimizer});
      variants.push_back(
          {.stage = stage, .precision = precision, .offload = Offload::NvmeOptimizer});
      if (stage < 3) continue;
      variants.push_back(
          {.stage = stage, .precision = precision, .offload = Offload::OptimizerAndParams});
      if (precision != Precision::Fp32) {
        variants.push_back(
            {.stage = stage, .precision = precision, .offload = Offload::NvmeOptimizerAndParams});
      }
    }
  }
  return variants;
}

void expect_same_bits(std::span<const float> a, std::span<const float> b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(a[i]), std::bit_cast<std::uint32_t>(b[i]))
        << what << " " << i;
  }
}

void expect_same(const Observed& host, const Observed& device) {
  for (std::size_t step = 0; step < host.reports.size(); ++step) {
    EXPECT_EQ(host.reports[step].loss, device.reports[step].loss) << step;
    EXPECT_EQ(host.reports[step].grad_norm, device.reports[step].grad_norm) << step;
    EXPECT_EQ(host.reports[step].skipped, device.reports[step].skipped) << step;
  }
  expect_same_bits(host.params, device.params, "parameters");
  expect_same_bits(host.shard.master, device.shard.master, "checkpoint master");
  ASSERT_EQ(host.shard.states.size(), device.shard.states.size());
  for (std::size_t k = 0; k < host.shard.states.size(); ++k) {
    expect_same_bits(host.shard.states[k], device.shard.states[k], "checkpoint state");
  }
  EXPECT_EQ(host.peaks, device.peaks);
  EXPECT_EQ(host.highs, device.highs);
  EXPECT_EQ(host.scratch_peak, device.scratch_peak);
  EXPECT_EQ(host.collective_bytes, device.collective_bytes);
  EXPECT_EQ(host.links.pcie_h2d, device.links.pcie_h2d);
  EXPECT_EQ(host.links.pcie_d2h, device.links.pcie_d2h);
  EXPECT_EQ(host.links.nvme_read, device.links.nvme_read);
  EXPECT_EQ(host.links.nvme_write, device.links.nvme_write);
}

TEST(DeviceSeam, EveryVariantGivesTheHostBitsFromMemoryTheHostCannotTouch) {
  for (const Variant& v : seam_variants()) {
    SCOPED_TRACE(testing::name_of(v));
    const Observed host = train(v, nullptr, {});
    testing::GuardedMemorySpace space;
    const Observed device = train(v, &space, {});
    expect_same(host, device);
    EXPECT_GT(space.counts.element_ops, 0);
    // the optimizer runs in the space exactly when the plan keeps it on the device
    EXPECT_EQ(space.counts.optimizer_updates > 0, v.offload == Offload::None);
    EXPECT_EQ(space.allocations(), 0u);  // everything the engine placed there was freed
  }
}

// An fp16 overflow found in device gradients skips the step as in host memory.
TEST(DeviceSeam, AnOverflowInDeviceGradientsSkipsTheStep) {
  const int last_rank = testing::world_communicator().size() - 1;
  const EngineOptions inf_on_last_rank{
      .inject_inf = {{.step = 1, .rank = last_rank, .tensor = 2, .element = 3}}};
  for (const int stage : {0, 2, 3}) {
    const Variant v{.stage = stage, .precision = Precision::Fp16};
    SCOPED_TRACE(testing::name_of(v));
    const Observed host = train(v, nullptr, inf_on_last_rank);
    testing::GuardedMemorySpace space;
    const Observed device = train(v, &space, inf_on_last_rank);
    EXPECT_TRUE(device.reports[1].skipped);
    expect_same(host, device);
  }
}

// Through the caching allocator (as the CUDA backend allocates): the same bits, most buffers
// served from the cache, and every block back in the guarded space at the end.
TEST(DeviceSeam, TheCachingAllocatorGivesTheSameBitsWithFewAllocations) {
  for (const Variant& v : {Variant{.stage = 1, .precision = Precision::Bf16, .grad_accumulation = 2},
                           Variant{.stage = 3, .precision = Precision::Fp16, .offload = Offload::OptimizerAndParams},
                           Variant{.stage = 3, .precision = Precision::Fp32}}) {
    SCOPED_TRACE(testing::name_of(v));
    const Observed host = train(v, nullptr, {});
    testing::GuardedMemorySpace guarded;
    {
      CachingMemorySpace cache(guarded);
      const Observed device = train(v, &cache, {});
      expect_same(host, device);
      EXPECT_GT(cache.stats().reuses, 2 * cache.stats().inner_allocations);
      EXPECT_GE(cache.stats().peak_reserved, cache.stats().peak_allocated);
      EXPECT_EQ(cache.stats().allocated, 0);
    }
    EXPECT_EQ(guarded.allocations(), 0u);
  }
}

}  // namespace
}  // namespace zerolens::exec
