// The sweep over parallel layouts: layouts and points counted by hand, the pipeline's micro-step
// sampling against planning and simulating every micro-step, the Pareto front against a brute-force
// definition, pruning and threads against the plain evaluation of every point.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "sim/core/error.hpp"
#include "sim/plan/variants.hpp"
#include "sim/predict/prediction.hpp"
#include "sim/predict/sweep.hpp"
#include "sim/report/sweep_json.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

// 2 nodes of 4 GPUs; a 4-block transformer of 4 heads (TP up to 4, PP up to 4).
PlanRequest search_base(std::int64_t train_batch, Bytes gpu_memory = Bytes{80} << 30) {
  PlanRequest request;
  request.model = testing::small_transformer(4, 128);
  request.config = testing::mixed_adam(0, Precision::Bf16);
  request.config.batch = {.train_batch_size = train_batch};
  request.config.seq_len = 128;
  request.dp_size = 8;
  request.cluster = testing::test_cluster(4, gpu_memory);
  request.cluster.nodes = 2;
  request.cluster.gpu.peak_flops_fp16 = request.cluster.gpu.peak_flops_bf16 =
      request.cluster.gpu.peak_flops_fp32 = 100e12;
  request.cluster.gpu.hbm_bandwidth = 2e12;
  request.cluster.node.cpu_memory_bandwidth = 100e9;
  request.cluster.node.cpu_cores = 32;
  request.cluster.node.nvme_capacity_bytes = 0;  // no NVMe variants: smaller spaces
  return request;
}

SweepSpace layouts_space() {
  SweepSpace space;
  space.tensor_parallel = {1, 2, 4};
  space.pipeline_parallel = {1, 2};
  space.sequence_parallel = {false, true};
  return space;
}

std::string key(const SweepPoint& point) {
  return "[" + point.layout.label() + "] " + point.label();
}

TEST(SweepLayouts, EveryLayoutThatSplitsTheGpusAndTheBatch) {
  // 12 samples: dp 8 (tp 1, pp 1) does not divide them, dp 4, 2 and 1 do.
  std::vector<std::string> notes;
  const SweepEnumeration enumeration = enumerate_sweep(search_base(12), layouts_space(), notes);
  // tp 1 (SP off only) x pp 1, 2 = 2; tp 2 and tp 4 x SP off, on x pp 1, 2 = 8.
  ASSERT_EQ(enumeration.families.size(), 10u);
  std::map<std::string, int> data_parallel;
  for (const auto& family : enumeration.families)
    data_parallel[family.layout.label()] = family.layout.data;
  EXPECT_EQ(data_parallel.at("dp 8"), 8);
  EXPECT_EQ(data_parallel.at("pp 2 x dp 4"), 4);
  EXPECT_EQ(data_parallel.at("tp 2 sp x dp 4"), 4);
  EXPECT_EQ(data_parallel.at("tp 4 x pp 2 x dp 1"), 1);
  const auto& refused = enumeration.families.front();
  EXPECT_EQ(refused.layout.label(), "dp 8");
  EXPECT_NE(refused.verdict.find("not a multiple of the data-parallel size 8"), std::string::npos)
      << refused.verdict;
  EXPECT_EQ(refused.enumerated, 0);
  // Per layout: micro-batches dividing the batch per rank (powers of two) x checkpointing 2 x the
  // stage/offload choices: 9 without PP (stage 0: 1, stage 1: opt none/cpu 2, stage 2: 2, stage 3:
  // opt x param none/cpu 4), 3 with PP (stages 0 and 1 only).
  std::map<std::string, std::int64_t> expected;
  for (const auto& family : enumeration.families) {
    if (family.layout.data == 8) continue;
    const std::int64_t per_rank = 12 / family.layout.data;  // 3, 6 or 12
    const std::int64_t micro_batches = per_rank == 3   ? 1
                                       : per_rank == 6 ? 2
                                                       : 3;  // 1 | 1,2 | 1,2,4
    const std::int64_t choices = family.layout.pipeline > 1 ? 3 : 9;
    EXPECT_EQ(family.enumerated, micro_batches * 2 * choices) << family.layout.label();
  }
  std::int64_t total = 0;
  for (const auto& family : enumeration.families) total += family.enumerated;
  EXPECT_EQ(std::int64_t(enumeration.points.size()), total);
  for (const auto& point : enumeration.points) {
    EXPECT_EQ(point.micro_batch * point.grad_accumulation * point.layout.data, 12) << key(point);
    EXPECT_TRUE(point.layout.pipeline == 1 || point.stage <= 1) << key(point);
  }
}

TEST(SweepLayouts, LayoutsThatDoNotDivideTheGpusAreCountedInANote) {
  SweepSpace space;
  space.tensor_parallel = {1, 3};
  space.pipeline_parallel = {1, 16};
  std::vector<std::string> notes;
  const auto enumeration = enumerate_sweep(search_base(64), space, notes);
  ASSERT_EQ(enumeration.families.size(), 1u);  // tp 3 and pp 16 split no 8 GPUs
  EXPECT_EQ(std::count_if(notes.begin(), notes.end(),
                          [](const std::string& note) {
                            return note.find("3 layouts skipped") != std::string::npos;
                          }),
            1);
}

TEST(SweepLayouts, ZeroPlusPlusOnlyAtStageThreeWithoutModelParallelism) {
  SweepSpace space;
  space.tensor_parallel = {1, 2};
  space.stages = {1, 3};
  space.optimizer_devices = space.param_devices = {OffloadDevice::None};
  space.checkpointing = {false};
  space.micro_batches = {1};
  space.zeropp = {ZeroPlusPlus::Off, ZeroPlusPlus::All};
  std::vector<std::string> notes;
  const auto points = enumerate_sweep(search_base(64), space, notes).points;
  // Off: stages 1 and 3 on both layouts (4); all: stage 3 on tp 1 only (1).
  ASSERT_EQ(points.size(), 5u);
  EXPECT_EQ(std::count_if(points.begin(), points.end(),
                          [](const SweepPoint& p) { return p.zeropp == ZeroPlusPlus::All; }),
            1);
  EXPECT_EQ(notes.size(), 1u);
}

TEST(SweepLayouts, ParallelSearchFillsWhatIsNotGiven) {
  PlanRequest base = search_base(64);
  base.cluster.node.gpus_per_node = 8;
  base.dp_size = 16;
  SweepSpace space;
  space.virtual_stages = {1};
  add_parallel_search(base, space);
  EXPECT_EQ(space.tensor_parallel, (std::vector<int>{1, 2, 4, 8}));  // up to a node
  EXPECT_EQ(space.pipeline_parallel, (std::vector<int>{1, 2, 4}));   // divisors of the 4 blocks
  EXPECT_EQ(space.virtual_stages, (std::vector<int>{1}));            // given: kept
  EXPECT_EQ(space.sequence_parallel, (std::vector<bool>{false, true}));
  EXPECT_EQ(space.zeropp, (std::vector<ZeroPlusPlus>{ZeroPlusPlus::Off, ZeroPlusPlus::All}));
  base.config.zero.quantized_weights = true;  // the base's own ZeRO++ settings stay
  SweepSpace with_zeropp;
  add_parallel_search(base, with_zeropp);
  EXPECT_TRUE(with_zeropp.zeropp.empty());
}

// The pipeline's points are planned with fewer micro-steps than the step has; planning and
// simulating all of them (predict, every stage of the pipeline) must give the same figures.
void expect_sampling_matches(const PlanRequest& base, const SweepPoint& point) {
  SCOPED_TRACE(key(point));
  const SweepResult result = evaluate_sweep_point(base, point, TimelineOptions{});
  PlanRequest full = base;
  full.dp_size = point.layout.data;
  full.config =
      apply_variant(base.config, {"", point.stage, point.optimizer, point.param, std::nullopt});
  full.config.pipeline.size = point.layout.pipeline;
  full.config.pipeline.virtual_stages = point.layout.virtual_stages;
  if (point.layout.virtual_stages > 1)
    full.config.pipeline.schedule = PipelineSchedule::Interleaved;
  full.config.batch = {.micro_batch_per_gpu = point.micro_batch,
                       .gradient_accumulation_steps = point.grad_accumulation};
  full.config.activation_checkpointing.enabled = point.checkpointing;
  const Prediction prediction = predict(full);
  for (int d = 0; d < kDeviceCount; ++d)
    EXPECT_EQ(result.peak[std::size_t(d)], prediction.plan.devices[std::size_t(d)].peak)
        << "device " << d;
  ASSERT_TRUE(result.fits);
  EXPECT_NEAR(result.step_time, prediction.timeline.step_time,
              1e-9 * prediction.timeline.step_time);
  EXPECT_NEAR(result.model_flops_per_gpu, prediction.timeline.model_flops_per_gpu,
              1e-9 * prediction.timeline.model_flops_per_gpu);
  EXPECT_NEAR(result.exposed_communication, prediction.timeline.exposed_communication,
              1e-9 * prediction.timeline.step_time);
}

TEST(SweepPoint, PipelineSamplingMatchesEveryMicroStep) {
  const PlanRequest base = search_base(8 * 16);
  for (const int pp : {2, 4}) {
    const ParallelLayout layout{1, pp, 1, false, 8 / pp};
    const std::int64_t per_rank = 128 / layout.data;
    for (const int stage : {0, 1}) {
      expect_sampling_matches(base, {layout, std::nullopt, stage, OffloadDevice::None,
                                     OffloadDevice::None, 1, per_rank, false});
      expect_sampling_matches(base, {layout, std::nullopt, stage, OffloadDevice::None,
                                     OffloadDevice::None, 2, per_rank / 2, true});
    }
  }
  // Interleaved: 2 stages x 2 chunks, rounds of 2 micro-batches.
  expect_sampling_matches(base, {{1, 2, 2, false, 4},
                                 std::nullopt,
                                 1,
                                 OffloadDevice::None,
                                 OffloadDevice::None,
                                 1,
                                 32,
                                 false});
  // GPipe: every micro-step is planned (each keeps its activations until the backwards).
  PlanRequest gpipe = base;
  gpipe.config.pipeline.schedule = PipelineSchedule::GPipe;
  expect_sampling_matches(gpipe, {{1, 2, 1, false, 4},
                                  std::nullopt,
                                  0,
                                  OffloadDevice::None,
                                  OffloadDevice::None,
                                  4,
                                  8,
                                  false});
}

TEST(SweepPoint, SamplingPlansEnoughMicroStepsForTheMemoryPeak) {
  PipelineParallelism pipeline;
  EXPECT_EQ(sweep_sampling(pipeline, 100).simulated, kSweepSimulatedMicroSteps);
  pipeline.size = 8;
  EXPECT_EQ(sweep_sampling(pipeline, 100).simulated, 10);  // 8 in flight, then two steady periods
  EXPECT_EQ(sweep_sampling(pipeline, 5).simulated, 5);
  pipeline.schedule = PipelineSchedule::GPipe;
  EXPECT_EQ(sweep_sampling(pipeline, 100).simulated, 100);
  pipeline.schedule = PipelineSchedule::Interleaved;
  EXPECT_EQ(sweep_sampling(pipeline, 96).simulated, 24);
  EXPECT_EQ(sweep_sampling(pipeline, 96).period, 8);
  EXPECT_EQ(sweep_sampling(pipeline, 12).simulated,
            12);  // not a multiple of 8: planned whole, refused
}

SweepResult made(double step_time, double headroom, bool fits = true) {
  SweepResult result;
  result.fits = fits;
  result.step_time = step_time;
  result.headroom = headroom;
  return result;
}

TEST(SweepFront, OnlyPointsNoOtherBeatsInTimeAndHeadroom) {
  std::vector<SweepResult> results{made(1, 0.1), made(2, 0.5), made(2, 0.3),          made(3, 0.4),
                                   made(4, 0.9), made(1, 0.1), made(0.5, 0.95, false)};
  mark_pareto_front(results);
  // (1, 0.1) once (its twin is no better), (2, 0.5), (4, 0.9); never what does not fit.
  const std::vector<bool> expected{true, true, false, false, true, false, false};
  for (std::size_t i = 0; i < results.size(); ++i) EXPECT_EQ(results[i].pareto, expected[i]) << i;
}

bool dominates(const SweepResult& a, const SweepResult& b) {
  return a.step_time <= b.step_time && a.headroom >= b.headroom &&
         (a.step_time < b.step_time || a.headroom > b.headroom);
}

// GPUs as large as the median over layouts of each one's smallest GPU peak: some layouts fit,
// some do not.
Bytes median_layout_memory() {
  const SweepReport roomy = run_sweep(search_base(64), layouts_space(), TimelineOptions{});
  std::map<std::string, Bytes> smallest;
  for (const auto& result : roomy.results) {
    const std::string layout = result.point.layout.label();
    if (!smallest.count(layout) || result.peak[0] < smallest[layout])
      smallest[layout] = result.peak[0];
  }
  std::vector<Bytes> peaks;
  for (const auto& [layout, peak] : smallest) peaks.push_back(peak);
  std::sort(peaks.begin(), peaks.end());
  return peaks[peaks.size() / 2];
}

// A search where some layouts fit and some do not, with pruning and without.
SweepReport searched(bool prune, int threads) {
  static const Bytes memory = median_layout_memory();
  SweepSpace space = layouts_space();
  space.prune = prune;
  space.threads = threads;
  return run_sweep(search_base(64, memory), space, TimelineOptions{});
}

TEST(Sweep, FrontAndVerdictsAgreeWithTheirDefinitions) {
  const SweepReport report = searched(false, 1);
  ASSERT_GT(report.fitting, 1);
  ASSERT_LT(report.fitting, report.evaluated);
  std::set<FamilyFate> fates;
  for (const auto& result : report.results) {
    if (!result.fits) {
      EXPECT_FALSE(result.pareto);
      EXPECT_LT(result.headroom, 0) << key(result.point);
      continue;
    }
    const bool beaten = std::any_of(
        report.results.begin(), report.results.end(),
        [&](const SweepResult& other) { return other.fits && dominates(other, result); });
    // Among equals one stands for all: the front never holds two identical points.
    EXPECT_TRUE(!result.pareto || !beaten) << key(result.point);
    if (!result.pareto && !beaten) {
      EXPECT_TRUE(std::any_of(report.results.begin(), report.results.end(),
                              [&](const SweepResult& other) {
                                return other.pareto && other.step_time == result.step_time &&
                                       other.headroom == result.headroom;
                              }))
          << key(result.point);
    }
  }
  for (const auto& family : report.families) {
    fates.insert(family.fate);
    std::int64_t fitting = 0, on_front = 0;
    for (const auto& result : report.results)
      if (result.point.layout == family.layout) fitting += result.fits, on_front += result.pareto;
    EXPECT_EQ(family.fitting, fitting) << family.layout.label();
    EXPECT_EQ(family.on_front, on_front) << family.layout.label();
    const FamilyFate expected = family.evaluated == 0 ? FamilyFate::Refused
                                : fitting == 0        ? FamilyFate::NothingFits
                                : on_front > 0        ? FamilyFate::OnFront
                                                      : FamilyFate::Dominated;
    EXPECT_EQ(family.fate, expected) << family.layout.label() << ": " << family.verdict;
  }
  EXPECT_TRUE(fates.count(FamilyFate::OnFront) && fates.count(FamilyFate::NothingFits))
      << "a search that tests little";
}

TEST(Sweep, PruningSkipsOnlyPointsThatDoNotFit) {
  const SweepReport every = searched(false, 1);
  const SweepReport pruned = searched(true, 1);
  EXPECT_EQ(every.enumerated, pruned.enumerated);
  EXPECT_GT(pruned.pruned, 0);
  EXPECT_EQ(pruned.evaluated + pruned.pruned + pruned.refused, every.evaluated + every.refused);
  EXPECT_EQ(pruned.fitting, every.fitting);
  ASSERT_EQ(pruned.results.size() + std::size_t(pruned.pruned), every.results.size());
  // The fitting points come first in both, in the same order, with the same figures.
  for (std::size_t i = 0; i < std::size_t(every.fitting); ++i) {
    EXPECT_EQ(key(pruned.results[i].point), key(every.results[i].point));
    EXPECT_EQ(pruned.results[i].step_time, every.results[i].step_time);
    EXPECT_EQ(pruned.results[i].pareto, every.results[i].pareto);
  }
}

TEST(Sweep, TwoThreadsGiveTheReportOfOne) {
  const SweepReport one = searched(true, 1);
  const SweepReport two = searched(true, 2);
  ASSERT_EQ(one.results.size(), two.results.size());
  for (std::size_t i = 0; i < one.results.size(); ++i) {
    EXPECT_EQ(key(one.results[i].point), key(two.results[i].point));
    EXPECT_EQ(one.results[i].step_time, two.results[i].step_time);
    EXPECT_EQ(one.results[i].peak, two.results[i].peak);
  }
  ASSERT_EQ(one.families.size(), two.families.size());
  for (std::size_t i = 0; i < one.families.size(); ++i)
    EXPECT_EQ(one.families[i].verdict, two.families[i].verdict);
  std::int64_t last = 0, calls = 0;
  SweepSpace space = layouts_space();
  space.threads = 2;
  const SweepReport counted =
      run_sweep(search_base(64, median_layout_memory()), space, TimelineOptions{},
                [&](std::int64_t done, std::int64_t total) {
                  EXPECT_GT(done, last);
                  EXPECT_EQ(total, one.enumerated);
                  last = done;
                  ++calls;
                });
  EXPECT_EQ(last, counted.enumerated);
  EXPECT_GT(calls, 0);
}

TEST(Sweep, WhenThePlannerRefusesEveryPointItsReasonIsTheError) {
  SweepSpace space;
  space.pipeline_parallel = {2};
  space.virtual_stages = {2};
  // 3 samples per data-parallel rank (dp 4): 3 or 1 micro-steps, never a multiple of the 2 stages.
  try {
    run_sweep(search_base(12), space, TimelineOptions{});
    FAIL() << "expected the interleaved schedule's refusal";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("interleaved"), std::string::npos) << error.what();
  }
}

TEST(Sweep, JsonCarriesLayoutsFrontAndFamilies) {
  const PlanRequest base = search_base(64);
  const SweepReport report = searched(true, 2);
  const nlohmann::json document = sweep_to_json(report, base);
  EXPECT_EQ(document["version"], 2);
  EXPECT_EQ(document["enumerated"], report.enumerated);
  EXPECT_EQ(document["pruned"], report.pruned);
  ASSERT_EQ(document["families"].size(), report.families.size());
  EXPECT_EQ(document["families"][0]["verdict"], report.families[0].verdict);
  for (std::size_t i = 0; i < report.results.size(); ++i) {
    const auto& row = document["results"][i];
    EXPECT_EQ(row["tensor_parallel"], report.results[i].point.layout.tensor);
    EXPECT_EQ(row["data_parallel"], report.results[i].point.layout.data);
    EXPECT_EQ(row["pareto"], report.results[i].pareto);
    EXPECT_DOUBLE_EQ(row["headroom"].get<double>(), report.results[i].headroom);
  }
}

}  // namespace
}  // namespace zerolens
