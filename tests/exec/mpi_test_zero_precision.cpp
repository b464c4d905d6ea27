// Mixed precision and host offload under mpirun (1, 2, 4 ranks): every stage, precision and
// offload setting trains the toy model along stage 0's loss trajectory in the same precision
// (bit for bit where the arithmetic is the same: one micro-step, at most two ranks, whose sums
// have one order), 16-bit runs stay near fp32, and model-state memory, collective bytes and
// host-device copy bytes equal the plan's.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine_variants.hpp"
#include "kernels/precision.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens::exec {
namespace {

using testing::Offload;
using testing::Variant;

constexpr int kSteps = 8;

struct TrainedRun {
  std::vector<double> losses;
  std::vector<float> params;
};

TrainedRun train(const Variant& v, int steps = kSteps) {
  Communicator& comm = testing::world_communicator();
  const Plan plan = testing::variant_plan(v, comm.size());
  testing::ToyLayerModel model(testing::kVariantShape);
  MemoryLedger ledger;
  ZeroEngine engine(plan, comm, model, ledger);
  TrainedRun run;
  for (int step = 0; step < steps; ++step) {
    const StepReport report = engine.step(step);
    EXPECT_FALSE(report.skipped) << "step " << step;
    run.losses.push_back(report.loss);
  }
  run.params = engine.full_parameters();
  return run;
}

std::vector<Variant> variants_of(Precision precision, std::int64_t grad_accumulation) {
  std::vector<Variant> variants;
  for (const int stage : {1, 2, 3}) {
    variants.push_back({.stage = stage, .precision = precision, .grad_accumulation = grad_accumulation});
    variants.push_back({.stage = stage, .precision = precision, .offload = Offload::OptimizerAndParams,
                        .grad_accumulation = grad_accumulation});
    for (const Offload offload : {Offload::Optimizer, Offload::NvmeOptimizer, Offload::NvmeOptimizerAndParams}) {
      // fp32 with parameters in NVMe files is refused (see RefusesWhatItDoesNotRun)
      if (precision == Precision::Fp32 && offload == Offload::NvmeOptimizerAndParams) continue;
      variants.push_back({.stage = stage, .precision = precision, .offload = offload, .grad_accumulation = grad_accumulation});
    }
  }
  std::erase_if(variants, [](const Variant& v) {
    return (v.offload == Offload::OptimizerAndParams || v.offload == Offload::NvmeOptimizerAndParams) && v.stage != 3;
  });
  return variants;
}

// With several micro-steps or four ranks the sums are rounded in another order (stage 0 adds
// micro-steps before reducing, the others after; MPI's all-reduce and reduce-scatter pair ranks
// differently): fp32 within 2e-5 relative, 16-bit within 2e-3 relative (bf16 keeps 8 significant
// bits, 4e-3 relative per rounding, but Adam's update depends on the gradient's sign and ratio).
double tolerance(Precision precision, bool same_order, double loss) {
  if (same_order) return 0;
  return (precision == Precision::Fp32 ? 2e-5 : 2e-3) * loss + 1e-7;
}

TEST(ZeroPrecision, EveryStageAndOffloadFollowsStageZero) {
  const int ranks = testing::world_communicator().size();
  for (const Precision precision : {Precision::Fp32, Precision::Bf16, Precision::Fp16}) {
    for (const std::int64_t ga : {1, 2}) {
      const TrainedRun reference = train({.stage = 0, .precision = precision, .grad_accumulation = ga});
      const bool same_order = ga == 1 && ranks <= 2;
      for (const Variant& v : variants_of(precision, ga)) {
        SCOPED_TRACE(testing::name_of(v));
        const TrainedRun run = train(v);
        for (int step = 0; step < kSteps; ++step) {
          const double expected = reference.losses[std::size_t(step)];
          EXPECT_NEAR(run.losses[std::size_t(step)], expected, tolerance(precision, same_order, expected)) << step;
        }
        ASSERT_EQ(run.params.size(), reference.params.size());
        for (std::size_t i = 0; i < run.params.size(); ++i) {
          ASSERT_NEAR(run.params[i], reference.params[i], same_order ? 0.0 : 2e-3) << i;
        }
      }
    }
  }
}

// 16-bit training follows fp32's trajectory: within 1% (fp16, 11 significant bits) and 5% (bf16,
// 8 bits) of fp32's loss at every step, and every precision learns (the mean loss of the last
// three steps is below that of the first three).
TEST(ZeroPrecision, SixteenBitStaysNearFp32AndLearns) {
  const TrainedRun fp32 = train({.stage = 2, .precision = Precision::Fp32}, 20);
  for (const auto& [precision, relative] : {std::pair{Precision::Fp16, 0.01}, std::pair{Precision::Bf16, 0.05}}) {
    SCOPED_TRACE(to_string(precision));
    const TrainedRun run = train({.stage = 2, .precision = precision}, 20);
    for (std::size_t step = 0; step < run.losses.size(); ++step) {
      EXPECT_NEAR(run.losses[step], fp32.losses[step], relative * fp32.losses[step]) << step;
    }
  }
  for (const Precision precision : {Precision::Fp32, Precision::Bf16, Precision::Fp16}) {
    const TrainedRun run = train({.stage = 3, .precision = precision, .offload = Offload::OptimizerAndParams}, 20);
    const double first = run.losses[0] + run.losses[1] + run.losses[2];
    const double last = run.losses[17] + run.losses[18] + run.losses[19];
    EXPECT_LT(last, 0.9 * first) << to_string(precision);
  }
}

std::vector<Variant> every_variant() {
  std::vector<Variant> variants;
  for (const Precision precision : {Precision::Fp32, Precision::Bf16, Precision::Fp16}) {
    variants.push_back({.stage = 0, .precision = precision, .grad_accumulation = 2});
    for (const Variant& v : variants_of(precision, 2)) variants.push_back(v);
  }
  return variants;
}

// The highest each model-state category reaches on each device during a step equals the plan's,
// byte for byte; so do the bytes of every collective kind and of both host-device links.
TEST(ZeroPrecision, ModelStatesAndTrafficEqualThePlan) {
  Communicator& comm = testing::world_communicator();
  for (const Variant& v : every_variant()) {
    SCOPED_TRACE(testing::name_of(v));
    const Plan plan = testing::variant_plan(v, comm.size());
    testing::ToyLayerModel model(testing::kVariantShape);
    MemoryLedger ledger;
    ZeroEngine engine(plan, comm, model, ledger);
    engine.step(0);  // stage 1-2 reduce buffers appear in the first step and stay
    std::array<CollectiveCount, kOpKindCount> before{};
    for (int k = 0; k < kOpKindCount; ++k) before[std::size_t(k)] = comm.count(OpKind(k));
    const LinkBytes copied = engine.link_bytes();
    ledger.reset_peaks();
    ASSERT_FALSE(engine.step(1).skipped);
    const auto predicted = category_highs(plan.schedule);
    for (const Device device : {Device::Gpu, Device::Cpu, Device::Nvme}) {
      for (const Category category : {Category::Params, Category::Grads, Category::MasterParams, Category::OptimizerStates}) {
        EXPECT_EQ(ledger.category_highs(device)[std::size_t(category)],
                  predicted[std::size_t(device)][std::size_t(category)])
            << to_string(device) << " " << to_string(category);
      }
    }
    for (const OpKind kind : {OpKind::AllGather, OpKind::ReduceScatter, OpKind::AllReduce, OpKind::OverflowCheck, OpKind::GradNorm}) {
      EXPECT_EQ(comm.count(kind).bytes - before[std::size_t(kind)].bytes, plan.comm.of(kind).bytes) << to_string(kind);
    }
    EXPECT_EQ(engine.link_bytes().pcie_h2d - copied.pcie_h2d, plan.comm.links.pcie_h2d);
    EXPECT_EQ(engine.link_bytes().pcie_d2h - copied.pcie_d2h, plan.comm.links.pcie_d2h);
    EXPECT_EQ(engine.link_bytes().nvme_read - copied.nvme_read, plan.comm.links.nvme_read);
    EXPECT_EQ(engine.link_bytes().nvme_write - copied.nvme_write, plan.comm.links.nvme_write);
    // the whole of each device, swap buffers and staging included, at its high
    for (const Device device : {Device::Cpu, Device::Nvme}) {
      EXPECT_EQ(ledger.peak(device), plan.device(device).peak_per_rank) << to_string(device);
    }
  }
}

// The fp32 copies the fp32 kernels compute on are scratch, never a plan category: at most one
// layer's parameters and gradients (the toy's 8 x 8 weight and 8 biases, 72 floats each), none in fp32.
TEST(ZeroPrecision, ScratchIsOneLayerAndCountedApart) {
  Communicator& comm = testing::world_communicator();
  for (const Precision precision : {Precision::Fp32, Precision::Bf16}) {
    const Plan plan = testing::variant_plan({.stage = 3, .precision = precision}, comm.size());
    testing::ToyLayerModel model(testing::kVariantShape);
    MemoryLedger ledger;
    ZeroEngine engine(plan, comm, model, ledger);
    engine.step(0);
    EXPECT_EQ(ledger.scratch_peak(Device::Gpu), precision == Precision::Fp32 ? 0 : 2 * 72 * 4);
    EXPECT_EQ(ledger.scratch_current(Device::Gpu), 0);
  }
}

// 16-bit collectives on values whose sums are exact in the format, 2 bytes per element counted;
// fp16 sums past 65504 become inf; the overflow flag is one byte.
TEST(ZeroPrecision, SixteenBitCollectives) {
  Communicator& comm = testing::world_communicator();
  const int n = comm.size(), r = comm.rank();
  std::vector<std::uint16_t> fp16 = {kernels::fp32_to_fp16(float(r) + 0.5f), kernels::fp32_to_fp16(40000.0f)};
  const Bytes before = comm.count(OpKind::AllReduce).bytes;
  comm.all_reduce_sum(fp16, Precision::Fp16);
  EXPECT_EQ(comm.count(OpKind::AllReduce).bytes - before, 4);
  EXPECT_EQ(kernels::fp16_to_fp32(fp16[0]), float(n * (n - 1) / 2) + 0.5f * float(n));
  EXPECT_EQ(std::isinf(kernels::fp16_to_fp32(fp16[1])), n > 1);
  std::vector<std::uint16_t> bf16(std::size_t(2 * n)), mine(2), gathered(std::size_t(2 * n));
  for (int i = 0; i < 2 * n; ++i) bf16[std::size_t(i)] = kernels::fp32_to_bf16(float(i * 4 + r));
  comm.reduce_scatter_sum(bf16, mine, Precision::Bf16);
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(kernels::bf16_to_fp32(mine[std::size_t(j)]), float(n * (4 * (2 * r + j)) + n * (n - 1) / 2));
  }
  comm.all_gather(mine, gathered);
  EXPECT_EQ(gathered[std::size_t(2 * r)], mine[0]);
  const Bytes flags = comm.count(OpKind::OverflowCheck).bytes;
  EXPECT_EQ(comm.all_reduce_flag(r == n - 1, OpKind::OverflowCheck), true);
  EXPECT_EQ(comm.all_reduce_flag(false, OpKind::OverflowCheck), false);
  EXPECT_EQ(comm.count(OpKind::OverflowCheck).bytes - flags, 2);
}

TEST(ZeroPrecision, RefusesWhatItDoesNotRun) {
  Communicator& comm = testing::world_communicator();
  testing::ToyLayerModel model(testing::kVariantShape);
  MemoryLedger ledger;
  const auto refused = [&](Variant v, auto&& change) {
    PlanRequest request = testing::variant_plan(v, comm.size()).request;
    change(request.config);
    const Plan plan = make_plan(request);
    EXPECT_THROW(ZeroEngine(plan, comm, model, ledger), InputError) << testing::name_of(v);
  };
  refused({.stage = 3, .precision = Precision::Bf16}, [](TrainingConfig& c) { c.zero.offload_param.device = OffloadDevice::Cpu; });
  refused({.stage = 3, .precision = Precision::Fp32, .offload = Offload::NvmeOptimizerAndParams}, [](TrainingConfig&) {});
  refused({.stage = 3, .precision = Precision::Bf16, .offload = Offload::NvmeOptimizer},
          [](TrainingConfig& c) { c.zero.offload_optimizer.buffer_count = 3; });  // master, 2 Adam states, gradient: 4
  refused({.stage = 3, .precision = Precision::Bf16, .offload = Offload::NvmeOptimizerAndParams},
          [](TrainingConfig& c) { c.zero.offload_param.buffer_size = 1; });  // 5 < a layer's partition (72 / ranks)
  refused({.stage = 3, .precision = Precision::Bf16, .offload = Offload::NvmeOptimizer},
          [](TrainingConfig& c) { c.zero.offload_optimizer.nvme_path = "/proc/zerolens-cannot-be-here"; });
  refused({.stage = 2, .precision = Precision::Bf16}, [](TrainingConfig& c) {
    c.activation_checkpointing.enabled = true;
    c.activation_checkpointing.cpu_checkpointing = true;
  });
  refused({.stage = 2, .precision = Precision::Fp16, .static_scale = -1}, [](TrainingConfig&) {});
}

}  // namespace
}  // namespace zerolens::exec
