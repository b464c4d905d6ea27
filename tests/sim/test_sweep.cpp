// The sweep: enumeration counted by hand, the global batch kept, ranking order, and the
// micro-step extrapolation checked against simulating every micro-step (a second code path).
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "sim/plan/variants.hpp"
#include "sim/predict/sweep.hpp"
#include "sim/report/sweep_json.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

Model small_transformer() { return testing::small_transformer(4, 128); }

Cluster sweep_cluster(Bytes gpu_memory = Bytes{80} << 30) {
  Cluster cluster = testing::test_cluster(4, gpu_memory);
  cluster.gpu.peak_flops_fp16 = cluster.gpu.peak_flops_bf16 = cluster.gpu.peak_flops_fp32 = 100e12;
  cluster.gpu.hbm_bandwidth = 2e12;
  cluster.node.cpu_memory_bandwidth = 100e9;
  cluster.node.cpu_cores = 32;
  cluster.node.nvme_read_bandwidth = cluster.node.nvme_write_bandwidth = 5e9;
  cluster.nodes = 2;
  return cluster;
}

PlanRequest base_request(std::int64_t train_batch, Cluster cluster = sweep_cluster()) {
  PlanRequest request;
  request.model = small_transformer();
  request.config = testing::mixed_adam(0, Precision::Bf16);
  request.config.batch = {.train_batch_size = train_batch};
  request.config.seq_len = 128;
  request.config.zero.offload_optimizer.nvme_path = request.config.zero.offload_param.nvme_path = "/nvme";
  request.dp_size = 8;
  request.cluster = cluster;
  return request;
}

// Per micro-batch size: stage 0 (1) + stage 1 (opt none/cpu: 2) + stage 2 (2) + stage 3
// (opt none/cpu/nvme x param none/cpu/nvme: 9) = 14 stage/offload choices, x 2 checkpointing.
TEST(SweepEnumeration, CountsEveryAcceptedCombination) {
  std::vector<std::string> notes;
  // 64 samples over 8 ranks = 8 per rank: micro-batches 1, 2, 4, 8.
  const auto points = enumerate_sweep(base_request(64), SweepSpace{}, notes).points;
  EXPECT_EQ(points.size(), 4u * 14u * 2u);
  EXPECT_TRUE(notes.empty());
  for (const auto& p : points) {
    EXPECT_EQ(p.micro_batch * p.grad_accumulation, 8) << p.label();
    EXPECT_TRUE(p.param == OffloadDevice::None || p.stage == 3) << p.label();
    EXPECT_TRUE(p.optimizer == OffloadDevice::None || p.stage >= 1) << p.label();
    EXPECT_TRUE(p.optimizer != OffloadDevice::Nvme || p.stage == 3) << p.label();
  }
}

TEST(SweepEnumeration, ClusterWithoutNvmeDropsNvmeAndSaysSo) {
  Cluster cluster = sweep_cluster();
  cluster.node.nvme_capacity_bytes = 0;
  std::vector<std::string> notes;
  // Stage 3 keeps opt none/cpu x param none/cpu = 4: 1 + 2 + 2 + 4 = 9 per micro-batch.
  const auto points = enumerate_sweep(base_request(64, cluster), SweepSpace{}, notes).points;
  EXPECT_EQ(points.size(), 4u * 9u * 2u);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("NVMe"), std::string::npos);
}

TEST(SweepEnumeration, MicroBatchesThatDoNotDivideAreSkippedWithANote) {
  SweepSpace space;
  space.stages = {2};
  space.optimizer_devices = {OffloadDevice::None};
  space.param_devices = {OffloadDevice::None};
  space.checkpointing = {false};
  space.micro_batches = {3, 4, 4, 5};  // 12 per rank: 3 and 4 divide, 5 does not; duplicates collapse
  std::vector<std::string> notes;
  const auto points = enumerate_sweep(base_request(96), space, notes).points;
  ASSERT_EQ(points.size(), 2u);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(points[0].grad_accumulation, 4);
  EXPECT_EQ(points[1].grad_accumulation, 3);
  space.micro_batches = {5};
  notes.clear();
  EXPECT_THROW(enumerate_sweep(base_request(96), space, notes), InputError);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("micro-batch 5"), std::string::npos);
}

// The sweep simulates at most kSweepSimulatedMicroSteps micro-steps and extrapolates; the full
// plan and timeline of every micro-step must agree.
void expect_extrapolation_matches(const PlanRequest& base) {
  const TimelineOptions options;
  std::vector<std::string> notes;
  for (const auto& point : enumerate_sweep(base, SweepSpace{}, notes).points) {
    if (point.grad_accumulation <= kSweepSimulatedMicroSteps) continue;
    SCOPED_TRACE(point.label());
    const SweepResult result = evaluate_sweep_point(base, point, options);
    PlanRequest full = base;
    full.config =
        apply_variant(base.config, {"", point.stage, point.optimizer, point.param, std::nullopt});
    full.config.batch = {.micro_batch_per_gpu = point.micro_batch, .gradient_accumulation_steps = point.grad_accumulation};
    full.config.activation_checkpointing.enabled = point.checkpointing;
    const Plan plan = make_plan(full);
    for (int d = 0; d < kDeviceCount; ++d) EXPECT_EQ(result.peak[std::size_t(d)], plan.devices[std::size_t(d)].peak);
    ASSERT_TRUE(result.fits);
    const Timeline timeline = simulate_timeline(plan.schedule, plan.request.cluster, options);
    EXPECT_NEAR(result.step_time, timeline.step_time, 1e-9 * timeline.step_time);
    EXPECT_NEAR(result.tokens_per_second, timeline.tokens_per_second, 1e-9 * timeline.tokens_per_second);
    EXPECT_NEAR(result.model_flops_per_gpu, timeline.model_flops_per_gpu, 1e-9 * timeline.model_flops_per_gpu);
    EXPECT_NEAR(result.mfu, timeline.mfu, 1e-9);
    EXPECT_NEAR(result.exposed_communication, timeline.exposed_communication, 1e-9 * timeline.step_time);
  }
}

TEST(SweepPoint, ExtrapolatedStepMatchesSimulatingEveryMicroStep) {
  expect_extrapolation_matches(base_request(8 * 8));
}

// Communication-bound: a slow network and PCIe make reductions and offload copies outlast compute,
// so micro-steps overlap the previous one's tail.
TEST(SweepPoint, ExtrapolationHoldsWhenCommunicationDominates) {
  Cluster cluster = sweep_cluster();
  cluster.inter_node = {"slow", 1e8, 50e-6};
  cluster.node.pcie = {"slow PCIe", 1e8, 50e-6};
  cluster.node.nvme_read_bandwidth = cluster.node.nvme_write_bandwidth = 1e8;
  expect_extrapolation_matches(base_request(8 * 8, cluster));
}

TEST(Sweep, RanksFittingPointsByThroughputAndKeepsTheGlobalBatch) {
  // GPUs as large as the median GPU peak of the sweep: about half the points fit.
  PlanRequest base = base_request(8 * 32);
  SweepSpace every_point;
  every_point.prune = false;  // every point evaluated, the ones that do not fit too
  std::vector<Bytes> peaks;
  for (const auto& r : run_sweep(base, every_point, TimelineOptions{}).results)
    peaks.push_back(r.peak[0]);
  std::nth_element(peaks.begin(), peaks.begin() + std::ptrdiff_t(peaks.size() / 2), peaks.end());
  base.cluster.gpu.memory_bytes = peaks[peaks.size() / 2];
  std::int64_t calls = 0, last_done = 0;
  const SweepReport report =
      run_sweep(base, every_point, TimelineOptions{}, [&](std::int64_t done, std::int64_t total) {
        ++calls;
        EXPECT_EQ(done, last_done + 1);
        last_done = done;
        EXPECT_EQ(total, 6 * 14 * 2);
      });
  EXPECT_EQ(calls, report.evaluated);
  EXPECT_EQ(report.evaluated, std::int64_t(report.results.size()));
  EXPECT_EQ(report.train_batch_size, 256);
  ASSERT_GT(report.fitting, 0);
  ASSERT_LT(report.fitting, report.evaluated);
  std::int64_t fitting = 0;
  for (std::size_t i = 0; i < report.results.size(); ++i) {
    const SweepResult& r = report.results[i];
    EXPECT_EQ(r.point.micro_batch * r.point.grad_accumulation * base.dp_size, 256);
    EXPECT_EQ(r.fits, r.peak[0] <= r.capacity[0] && r.peak[1] <= r.capacity[1] && r.peak[2] <= r.capacity[2]);
    if (!r.fits) continue;
    ++fitting;
    EXPECT_EQ(i + 1, std::size_t(fitting)) << "every fitting point comes before every other";
    EXPECT_GT(r.step_time, 0);
    // tokens/s is the global batch's tokens over the step time.
    EXPECT_NEAR(r.tokens_per_second, 256.0 * 128 / r.step_time, 1e-6 * r.tokens_per_second);
    if (i > 0) {
      EXPECT_GE(report.results[i - 1].tokens_per_second, r.tokens_per_second);
    }
  }
  EXPECT_EQ(fitting, report.fitting);
}

TEST(Sweep, JsonCarriesEveryResultInRankOrder) {
  const PlanRequest base = base_request(64);
  SweepSpace space;
  space.stages = {1, 2};
  const SweepReport report = run_sweep(base, space, TimelineOptions{});
  const nlohmann::json document = sweep_to_json(report, base);
  EXPECT_EQ(document["schema"], "zerolens.sweep");
  EXPECT_EQ(document["version"], kSweepJsonVersion);
  ASSERT_EQ(document["results"].size(), report.results.size());
  EXPECT_EQ(document["evaluated"], 4 * (2 + 2) * 2);
  for (std::size_t i = 0; i < report.results.size(); ++i) {
    const auto& row = document["results"][i];
    EXPECT_EQ(row["rank"], std::int64_t(i + 1));
    EXPECT_EQ(row["stage"], report.results[i].point.stage);
    EXPECT_EQ(row["peak_bytes"]["gpu"], report.results[i].peak[0]);
    EXPECT_DOUBLE_EQ(row["step_time_s"].get<double>(), report.results[i].step_time);
  }
}

}  // namespace
}  // namespace zerolens
