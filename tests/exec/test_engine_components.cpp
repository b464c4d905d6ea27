// The ZeRO engine's components alone, on one rank (SoloCommunicator), each against a reference
// worked out independently of the engine: the owned layout by hand, the host Adam against float64,
// NVMe traffic against a hand count, reduced gradients against the values written, gathered
// parameters against the model's initial values, checkpoint shards against the whole tensors
// restored.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine_variants.hpp"
#include "exec/engine/components.hpp"
#include "solo_communicator.hpp"

namespace zerolens::exec {
namespace {

using testing::Offload;
using testing::Variant;

// Three tensors of 5, 3 and 4 elements over 2 ranks: flat partitions of 6, stage-3 partitions of
// ceil(numel / 2) = 3, 2 and 2.
ParamLayout three_tensors() {
  ParamLayout layout;
  layout.layer_first_tensor = {0, 3};
  layout.tensor_numel = {5, 3, 4};
  layout.tensor_layer = {0, 0, 0};
  layout.tensor_partition = {3, 2, 2};
  layout.tensor_persistent = {false, false, false};
  layout.total = 12;
  layout.flat_partition = 6;
  layout.dp_size = 2;
  return layout;
}

TEST(EngineLayout, OwnedSegmentsOfEachStageByHand) {
  const ParamLayout layout = three_tensors();
  // stage 0: every tensor whole, at its flat offset
  EXPECT_EQ(owned_segments(layout, ZeroStage{0}, 1),
            (std::vector<OwnedSegment>{{0, 0, 5, 0}, {1, 0, 3, 5}, {2, 0, 4, 8}}));
  // stages 1-2, flat [0, 6) and [6, 12): rank 0 all of tensor 0 and element 0 of tensor 1; rank 1
  // elements 1-2 of tensor 1 and all of tensor 2
  for (const int stage : {1, 2}) {
    EXPECT_EQ(owned_segments(layout, ZeroStage{stage}, 0),
              (std::vector<OwnedSegment>{{0, 0, 5, 0}, {1, 0, 1, 5}}));
    EXPECT_EQ(owned_segments(layout, ZeroStage{stage}, 1),
              (std::vector<OwnedSegment>{{1, 1, 2, 0}, {2, 0, 4, 2}}));
  }
  // stage 3, rank 1: elements 3-4 of tensor 0, 2 of tensor 1, 2-3 of tensor 2, at partition offsets
  // 0, 3 and 5
  EXPECT_EQ(owned_segments(layout, ZeroStage{3}, 1),
            (std::vector<OwnedSegment>{{0, 3, 2, 0}, {1, 2, 1, 3}, {2, 2, 2, 5}}));
  // a segment clipped to owned elements [4, 6)
  EXPECT_EQ(clip({2, 0, 4, 2}, 4, 6), (OwnedSegment{2, 2, 2, 4}));
  EXPECT_EQ(clip({0, 0, 5, 0}, 5, 9).length, 0);
}

// The same three tensors over 4 data-parallel ranks with tensor 1 an expert over expert-data
// groups of 2 (expert parallelism 2): the others' flat order is tensor 0 then tensor 2 (9
// elements, partitions of ceil(9 / 4) = 3), the expert's its 3 elements (partitions of ceil(3 /
// 2) = 2), owned after the others' partition. Stage-3 partitions: ceil(5 / 4) = 2, ceil(3 / 2) =
// 2, ceil(4 / 4) = 1.
TEST(EngineLayout, OwnedSegmentsWithAnExpertTensorByHand) {
  ParamLayout layout = three_tensors();
  layout.dp_size = 4;
  layout.expert_dp_size = 2;
  layout.tensor_expert = {false, true, false};
  layout.trainable = 12;
  layout.expert_total = 3;
  layout.flat_partition = 3;
  layout.expert_flat_partition = 2;
  layout.tensor_partition = {2, 2, 1};
  const TensorOffsets offsets = tensor_offsets(layout);
  EXPECT_EQ(offsets.flat, (std::vector<Elements>{0, 0, 5}));
  // stage 0: the others at [0, 9), the expert after them at 9
  EXPECT_EQ(owned_segments(layout, ZeroStage{0}, 3, 1),
            (std::vector<OwnedSegment>{{0, 0, 5, 0}, {1, 0, 3, 9}, {2, 0, 4, 5}}));
  for (const int stage : {1, 2}) {
    // DP rank 1 owns the others' flat [3, 6): elements 3-4 of tensor 0, 0 of tensor 2; as expert
    // rank 0 the expert's [0, 2), at owned offsets 3-4
    EXPECT_EQ(owned_segments(layout, ZeroStage{stage}, 1, 0),
              (std::vector<OwnedSegment>{{0, 3, 2, 0}, {1, 0, 2, 3}, {2, 0, 1, 2}}));
    // DP rank 3 owns flat [9, 12): nothing (padding); as expert rank 1 the expert's element 2
    EXPECT_EQ(owned_segments(layout, ZeroStage{stage}, 3, 1),
              (std::vector<OwnedSegment>{{1, 2, 1, 3}}));
  }
  // stage 3, DP rank 2, expert rank 1: tensor 0's elements 4, the expert's 2, tensor 2's 2
  EXPECT_EQ(owned_segments(layout, ZeroStage{3}, 2, 1),
            (std::vector<OwnedSegment>{{0, 4, 1, 0}, {1, 2, 1, 2}, {2, 2, 1, 4}}));
}

// What the components need, for one rank.
struct SoloSetup {
  explicit SoloSetup(const Variant& variant)
      : plan(testing::variant_plan(variant, 1)), net(testing::kVariantShape) {}
  Plan plan;
  testing::SoloCommunicator comm;
  MemoryLedger ledger;
  testing::ToyLayerModel net;
};

// The components wired as the engine wires them (EngineComponents), for one rank.
struct SoloEngineParts : SoloSetup, EngineComponents {
  explicit SoloEngineParts(const Variant& variant)
      : SoloSetup(variant), EngineComponents(plan, comm, net, ledger) {}
};

// A deterministic gradient value per owned element.
float gradient_at(std::size_t i) {
  return 0.05f * float(int(i % 7) - 3) + 0.01f;
}

TEST(EngineOptimizer, HostAdamMatchesFloat64Reference) {
  SoloEngineParts parts({.stage = 2, .offload = Offload::Optimizer});
  ASSERT_TRUE(parts.context.host_optimizer());
  const OptimizerConfig& config = parts.plan.request.config.optimizer;
  const auto owned = std::size_t(parts.context.layout.owned);
  const std::span<const float> master = parts.optimizer.in_memory().master;
  std::vector<double> p(master.begin(), master.end()), m(owned, 0), v(owned, 0);
  for (int t = 1; t <= 2; ++t) {
    const std::span<float> host = parts.grads.host_partition();
    for (std::size_t i = 0; i < owned; ++i) host[i] = gradient_at(i + std::size_t(t));
    parts.optimizer.optimizer().begin_step();
    parts.optimizer.update_range(parts.optimizer.in_memory(), 1.0f);
    // AdamW as PyTorch defines it, in float64
    for (std::size_t i = 0; i < owned; ++i) {
      const double g = gradient_at(i + std::size_t(t));
      p[i] -= config.lr * config.weight_decay * p[i];
      m[i] = config.beta1 * m[i] + (1 - config.beta1) * g;
      v[i] = config.beta2 * v[i] + (1 - config.beta2) * g * g;
      const double m_hat = m[i] / (1 - std::pow(config.beta1, t)),
                   v_hat = v[i] / (1 - std::pow(config.beta2, t));
      p[i] -= config.lr * m_hat / (std::sqrt(v_hat) + config.eps);
    }
  }
  const OptimizerRange range = parts.optimizer.in_memory();
  for (std::size_t i = 0; i < owned; ++i) {
    ASSERT_NEAR(range.master[i], p[i], 1e-6 * std::max(1.0, std::abs(p[i]))) << "element " << i;
    ASSERT_NEAR(range.first_state[i], m[i], 1e-7) << "element " << i;
    ASSERT_NEAR(range.second_state[i], v[i], 1e-9) << "element " << i;
  }
}

// The highest the plan's optimizer op holds of the fp32 gradient copies (Fp32GradCast).
Bytes planned_cast_peak(const Plan& plan) {
  Bytes held = 0, peak = 0;
  for (const Op& op : plan.schedule.ops) {
    if (op.kind != OpKind::OptimizerStep) continue;
    for (const auto& effect : plan.schedule.effects_of(op)) {
      if (effect.component != Component::Fp32GradCast) continue;
      held += effect.bytes;
      peak = std::max(peak, held);
    }
  }
  return peak;
}

// Stage 3 on the device converts the gradients to fp32 one sub-group at a time (DeepSpeed's
// _prepare_fp32_grad_for_sub_group): `self.flatten(...)` makes a bf16 flat copy of the sub-group
// and `.to(fp32)` its fp32 copy, both alive at the cast, so the step holds 2 + 4 bytes of one
// sub-group at most; the plan says the same of its optimizer op.
TEST(EngineOptimizer, Stage3CastsOneSubGroupToFp32AtATime) {
  constexpr Elements kSubGroup = 50;
  SoloEngineParts parts({.stage = 3, .precision = Precision::Bf16, .sub_group_size = kSubGroup});
  ASSERT_FALSE(parts.context.host_optimizer());
  ASSERT_GT(parts.context.layout.owned, 2 * kSubGroup);
  parts.ledger.reset_peaks();
  const Bytes before = parts.ledger.current(Device::Gpu);
  parts.optimizer.step();
  EXPECT_EQ(parts.ledger.peak(Device::Gpu) - before, kSubGroup * (2 + 4));
  EXPECT_EQ(parts.ledger.current(Device::Gpu), before);
  EXPECT_EQ(planned_cast_peak(parts.plan), kSubGroup * (2 + 4));
}

// fp32 under ZeRO: the flattened copy of a sub-group is its fp32 gradient (4 bytes an element, no
// 16-bit copy); the executor steps on it, not on the gradients where they are. (StepMemory holds
// every stage and precision, after every op of a whole step, to the plan.)
TEST(EngineOptimizer, Fp32ZeroStepsOnAFlattenedCopy) {
  constexpr Elements kSubGroup = 50;
  SoloEngineParts parts({.stage = 3, .precision = Precision::Fp32, .sub_group_size = kSubGroup});
  parts.ledger.reset_peaks();
  const Bytes before = parts.ledger.current(Device::Gpu);
  parts.optimizer.step();
  EXPECT_EQ(parts.ledger.peak(Device::Gpu) - before, kSubGroup * 4);
  EXPECT_EQ(planned_cast_peak(parts.plan), kSubGroup * 4);
}

TEST(EngineGradients, ReducedBucketsHoldTheGradientsWrittenByFlatPosition) {
  for (const int stage : {1, 2}) {
    SoloEngineParts parts({.stage = stage});
    const EngineContext& ctx = parts.context;
    // every layer's gradient: its flat position x 0.001
    for (std::size_t owner = 0; owner + 1 < ctx.layout.layer_first_tensor.size(); ++owner) {
      LayerGrads layer = parts.grads.layer_grads(owner);
      const auto [first, last] = ctx.tensors_of_layer(owner);
      for (auto t = first; t < last; ++t) {
        const std::span<float> view = layer.views[std::size_t(t - first)];
        for (std::size_t i = 0; i < view.size(); ++i)
          view[i] = 0.001f * float(ctx.offsets.flat[std::size_t(t)] + Elements(i));
      }
      layer.commit();
    }
    std::vector<bool> reduced(ctx.schedule.buckets.size(), false);
    for (const Op& op : ctx.schedule.ops) {
      if ((op.kind != OpKind::AllReduce && op.kind != OpKind::ReduceScatter) ||
          reduced.at(std::size_t(op.bucket)))
        continue;
      parts.grads.reduce_bucket(op);
      reduced[std::size_t(op.bucket)] = true;
    }
    Elements checked = 0;
    for (const OwnedSegment& segment : ctx.segments) {
      std::vector<float> values(std::size_t(segment.length));
      parts.grads.owned_grads(segment).read(values);
      for (std::size_t i = 0; i < values.size(); ++i) {
        const Elements flat =
            ctx.offsets.flat[std::size_t(segment.tensor)] + segment.begin + Elements(i);
        ASSERT_FLOAT_EQ(values[i], 0.001f * float(flat))
            << "stage " << stage << " tensor " << segment.tensor;
      }
      checked += segment.length;
    }
    EXPECT_EQ(checked, ctx.layout.total) << "stage " << stage;
  }
}

// Variants' NVMe files are under a directory of this process: other test jobs may run at once.
Variant nvme_variant() {
  return {.stage = 3, .precision = Precision::Bf16, .offload = Offload::NvmeOptimizer};
}

TEST(EngineNvme, SubGroupTrafficMatchesAHandCountAndRoundTrips) {
  Variant variant = nvme_variant();
  Plan plan = testing::variant_plan(variant, 1);
  const std::string directory = (std::filesystem::temp_directory_path() /
                                 ("zerolens-engine-nvme-" + std::to_string(getpid())))
                                    .string();
  plan.request.config.zero.offload_optimizer.nvme_path = directory;
  testing::SoloCommunicator comm;
  MemoryLedger ledger;
  EngineContext context(plan, comm, ledger);
  const std::size_t states = 2;  // AdamW
  std::filesystem::remove_all(directory);
  ::testing::internal::CaptureStderr();
  NvmeSwapper nvme(context, states);
  // A missing nvme_path is created as DeepSpeed does, but not silently (issue 19).
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("offload_optimizer.nvme_path: '" + directory + "' did not exist; created it"),
            std::string::npos)
      << said;
  ASSERT_TRUE(nvme.optimizer_in_files());
  ASSERT_FALSE(nvme.params_in_files());
  const Elements owned = context.layout.owned, group_size = 50;  // variant_plan's sub_group_size
  ASSERT_GT(owned, group_size);
  std::vector<float> master(static_cast<std::size_t>(owned));
  for (std::size_t i = 0; i < master.size(); ++i) master[i] = float(i) * 0.25f;
  nvme.init_optimizer(master);
  EXPECT_EQ(context.copied.nvme_write, 0);  // initialisation is not the schedule's traffic
  const auto groups = std::int32_t((owned + group_size - 1) / group_size);
  Bytes expected = 0;
  for (std::int32_t g = 0; g < groups; ++g) {
    const Elements length = std::min(group_size, owned - g * group_size);
    EXPECT_EQ(nvme.group_length(g), length);
    EXPECT_EQ(nvme.last_group(g), g + 1 == groups);
    nvme.read_group(g);
    nvme.wait_group(g);
    expected += length * 4 * Bytes(1 + states);  // fp32 master, m and v
    EXPECT_EQ(context.copied.nvme_read, expected);
    const OptimizerRange range = nvme.swapped_group(g);
    ASSERT_EQ(range.master.size(), std::size_t(length));
    for (std::size_t i = 0; i < range.master.size(); ++i) {
      ASSERT_EQ(range.master[i], master[std::size_t(g * group_size) + i]);
      ASSERT_EQ(range.first_state[i], 0.0f);
      range.second_state[i] = 1.0f + float(i);  // written back below
    }
    nvme.write_group(g);
    EXPECT_EQ(context.copied.nvme_write, expected);
  }
  nvme.finish_io();
  const std::vector<float> objects = nvme.read_optimizer_objects();  // [master | m | v]
  ASSERT_EQ(objects.size(), std::size_t(owned) * (1 + states));
  for (Elements i = 0; i < owned; ++i) {
    EXPECT_EQ(objects[std::size_t(i)], master[std::size_t(i)]);
    EXPECT_EQ(objects[std::size_t(2 * owned + i)], 1.0f + float(i % group_size));
  }
  EXPECT_EQ(ledger.current(Device::Nvme), owned * 4 * Bytes(1 + states));
}

// Stage 3 on one rank: a layer's gather holds exactly the model's own initial values (asked of the
// model directly, not through the store), charged to GatheredParams until its release; with the
// parameters offloaded to the host, staged to the device first (CopyH2D).
TEST(EngineParameters, AGatheredLayerHoldsTheModelsInitialValuesUntilReleased) {
  for (const Offload offload : {Offload::None, Offload::OptimizerAndParams}) {
    SCOPED_TRACE(offload == Offload::None ? "on the device" : "offloaded to the host");
    SoloEngineParts parts({.stage = 3, .offload = offload});
    const ParamLayout& layout = parts.context.layout;
    std::int64_t tensors_checked = 0;
    for (std::size_t owner = 0; owner + 1 < layout.layer_first_tensor.size(); ++owner) {
      if (parts.context.owner_of(owner) != owner) continue;
      const auto [first, last] = parts.context.tensors_of_layer(owner);
      Bytes gathered = 0;
      for (auto t = first; t < last; ++t) {
        if (!layout.tensor_persistent[std::size_t(t)])
          gathered += layout.tensor_partition[std::size_t(t)] * 4;  // fp32, dp = 1
      }
      const Bytes before = parts.ledger.current(Device::Gpu, Component::GatheredParams);
      if (offload != Offload::None) parts.params.stage_layer_partition(owner);
      parts.params.gather_layer(owner);
      EXPECT_EQ(parts.ledger.current(Device::Gpu, Component::GatheredParams), before + gathered);
      const LayerParams views = parts.params.layer_params(owner);
      ASSERT_EQ(views.views.size(), std::size_t(last - first));
      for (auto t = first; t < last; ++t) {
        std::vector<float> expected(std::size_t(layout.tensor_numel[std::size_t(t)]));
        parts.net.init_tensor(t, expected);
        const std::span<const float> view = views.views[std::size_t(t - first)];
        EXPECT_EQ(std::vector<float>(view.begin(), view.end()), expected) << "tensor " << t;
        ++tensors_checked;
      }
      parts.params.release_layer(owner);
      EXPECT_EQ(parts.ledger.current(Device::Gpu, Component::GatheredParams), before);
    }
    EXPECT_EQ(tensors_checked, std::int64_t(layout.tensor_numel.size()));
  }
}

TEST(EngineCheckpoint, ShardCutsTheRestoredWholeTensors) {
  for (const int stage : {0, 2, 3}) {
    SoloEngineParts parts({.stage = stage, .precision = Precision::Bf16});
    const EngineContext& ctx = parts.context;
    FullState state;
    state.meta = parts.checkpoint.meta();
    state.meta.step = 7;
    state.states.resize(2);
    for (std::size_t t = 0; t < ctx.layout.tensor_numel.size(); ++t) {
      const auto numel = std::size_t(ctx.layout.tensor_numel[t]);
      std::vector<float> master(numel), m(numel), v(numel);
      for (std::size_t i = 0; i < numel; ++i) {
        master[i] = 0.5f + float(t) + 0.125f * float(i);
        m[i] = -float(i);
        v[i] = float(t * 100 + i);
      }
      state.master.push_back(master);
      state.states[0].push_back(m);
      state.states[1].push_back(v);
    }
    parts.checkpoint.restore(state);
    EXPECT_EQ(parts.checkpoint.meta().step, 7);
    const RankShard shard = parts.checkpoint.shard();
    std::size_t read = 0;
    ASSERT_EQ(shard.segments.size(), ctx.segments.size());
    for (const CheckpointSegment& segment : shard.segments) {
      for (Elements i = 0; i < segment.length; ++i, ++read) {
        const auto t = std::size_t(segment.tensor), element = std::size_t(segment.begin + i);
        ASSERT_EQ(shard.master[read], state.master[t][element]) << "stage " << stage;
        ASSERT_EQ(shard.states[0][read], state.states[0][t][element]);
        ASSERT_EQ(shard.states[1][read], state.states[1][t][element]);
      }
    }
    EXPECT_EQ(read, std::size_t(ctx.layout.total));
    // the bf16 parameters are the master rounded (values of few significant bits are exact)
    const std::vector<float> whole = parts.params.full_parameters();
    EXPECT_EQ(whole.front(), state.master.front().front());
  }
}

}  // namespace
}  // namespace zerolens::exec
