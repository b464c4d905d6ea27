// ZeRO with expert groups in the CPU executor, under mpirun (ctest exec.parallel.np4; other rank
// counts skip). No MoE model is needed: gpt2-tiny's blocks' MLP tensors are flagged as experts
// (TensorSpec::expert) and the schedule is built with expert parallelism 2 over the 4 data-parallel
// ranks, so each MLP is data-parallel over its expert-data-parallel group, {0, 2} or {1, 3}
// (DeepSpeed's _create_expert_and_data_parallel), and trains on that group's samples alone, as an
// expert held by one expert-parallel rank does. The model runs no all-to-all (its MLPs are
// ordinary ones); the engine's part, two flat spaces and their groups, is what is tested.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "exec/run/training_run.hpp"
#include "parallel_support.hpp"
#include "sim/core/error.hpp"
#include "sim/schedule/builder.hpp"
#include "sim/schedule/comm.hpp"

namespace zerolens::exec {
namespace {

using namespace testing;  // parallel_support.hpp

constexpr int kSteps = 3;
constexpr int kExpertParallel = 2;

bool is_mlp(const TensorSpec& spec) {
  return spec.name.find(".mlp.") != std::string::npos;
}

enum class Experts { Mlps, Everything };

// gpt2_plan's plan with the blocks' MLPs (or every tensor) flagged as experts and the schedule
// rebuilt with expert parallelism (`expert_parallel`, 1: none), as make_plan builds it. The
// config's moe.ep_size stays 1: the planner refuses --ep for a model without MoE layers, and the
// schedule reads the model's.
Plan expert_plan(const Gpt2Setup& s, int expert_parallel = kExpertParallel,
                 Experts experts = Experts::Mlps) {
  Plan plan = gpt2_plan(s, 4);
  for (Layer& layer : plan.rank_model.layers) {
    for (TensorSpec& spec : layer.params)
      spec.expert = experts == Experts::Everything || is_mlp(spec);
  }
  plan.rank_model.expert_parallel.size = expert_parallel;
  ScheduleOptions options = plan.request.options;
  options.gpu_capacity = plan.request.cluster.gpu.memory_bytes;
  options.allocator.device_limit = options.gpu_capacity;  // no context or workspaces (gpt2_plan)
  plan.schedule =
      build_schedule(plan.rank_model, plan.request.config, plan.batch, plan.seq_len,
                     plan.request.dp_size, plan.request.cluster.node.gpus_per_node, options);
  plan.comm = summarize_comm(plan.schedule);
  return plan;
}

struct ExpertRun {
  Trained trained;
  std::vector<double> grad_norms;
  // Counted over every step: the data-parallel and the expert-data-parallel group's collectives.
  std::array<CollectiveCount, kOpKindCount> data{}, expert_data{};
};

ExpertRun train_experts(const Plan& plan, const Gpt2Setup& s, int steps) {
  const auto groups = std::make_shared<const ProcessGroups>(world(), plan.schedule.context);
  // The data-parallel group is the world, whose counts run on over the tests: counted from here.
  std::array<CollectiveCount, kOpKindCount> before{};
  for (int k = 0; k < kOpKindCount; ++k) before[std::size_t(k)] = groups->data().count(OpKind(k));
  MemoryLedger ledger;
  Gpt2Model model(plan.rank_model,
                  {.micro_batch = s.micro_batch,
                   .seq_len = s.seq_len,
                   .checkpointing = s.checkpointing,
                   .activation_element_bytes = plan.request.config.precision.param_bytes()},
                  ledger);
  ZeroEngine engine(plan, groups, model, ledger);
  ExpertRun run;
  for (int step = 0; step < steps; ++step) {
    ledger.reset_peaks();
    const StepReport report = engine.step(step);
    run.trained.losses.push_back(report.loss);
    run.grad_norms.push_back(report.grad_norm);
    if (ledger.peak(Device::Gpu) > run.trained.measured_peak) {
      run.trained.measured_peak = ledger.peak(Device::Gpu);
      run.trained.at_peak = ledger.categories_at_peak(Device::Gpu);
    }
    const CategoryBytes highs = ledger.category_highs(Device::Gpu);
    for (std::size_t c = 0; c < highs.size(); ++c)
      run.trained.highs[c] = std::max(run.trained.highs[c], highs[c]);
  }
  for (int k = 0; k < kOpKindCount; ++k) {
    const CollectiveCount& data = groups->data().count(OpKind(k));
    run.data[std::size_t(k)] = {.calls = data.calls - before[std::size_t(k)].calls,
                                .bytes = data.bytes - before[std::size_t(k)].bytes};
    if (groups->expert_data() != nullptr)
      run.expert_data[std::size_t(k)] = groups->expert_data()->count(OpKind(k));
  }
  run.trained.parameters = engine.full_parameters();
  return run;
}

// Every rank's `values`, gathered (rank r's at r x size).
std::vector<float> gather_all(const std::vector<float>& values) {
  std::vector<float> all(values.size() * std::size_t(world().size()));
  world().all_gather(std::span<const float>(values), std::span<float>(all));
  return all;
}

std::vector<float> rank_part(const std::vector<float>& all, std::size_t size, int rank) {
  return {all.begin() + std::ptrdiff_t(size * std::size_t(rank)),
          all.begin() + std::ptrdiff_t(size * std::size_t(rank + 1))};
}

// The plan's layout puts the MLPs in the expert space: each rank owns ceil(non-expert / 4) of the
// others and ceil(MLP elements / 2) of the experts (stages 1-2), an MLP tensor's stage-3 partition
// is half of it.
TEST(ExpertGroups, PlanSplitsTheLayoutIntoTwoSpaces) {
  if (!four_ranks()) GTEST_SKIP() << "expert groups of 2 x 2 run on 4 ranks";
  const Plan plan = expert_plan({.stage = 2});
  const ParamLayout& layout = plan.schedule.layout;
  Elements mlp = 0;
  for (const TensorSpec* spec : tensors_of(plan.rank_model))
    mlp += is_mlp(*spec) ? spec->numel() : 0;
  ASSERT_GT(mlp, 0);
  EXPECT_EQ(layout.expert_dp_size, 2);
  EXPECT_EQ(layout.expert_total, mlp);
  EXPECT_EQ(layout.flat_partition, (layout.trainable - mlp + 3) / 4);
  EXPECT_EQ(layout.expert_flat_partition, (mlp + 1) / 2);
  EXPECT_EQ(layout.owned, layout.flat_partition + layout.expert_flat_partition);
}

// (a) ZeRO 1, 2 and 3 with expert groups train as stage 0 with expert groups does (a second code
// path: whole gradients all-reduced, the MLPs' over the expert-data group, no partitions): the
// same losses and, with SGD (updates in proportion to the gradients, unlike Adam's near-sign first
// steps), the same parameters on every rank, to rounding (the executor's parity tolerances, tests
// /exec/parallel_test_tensor.cpp: losses 2e-4, parameters 1e-5 relative in fp32; bf16 2e-3 and
// 8/256). Two micro-steps accumulate; in bf16 stages 2 and 3 also with the optimizer on the host,
// stage 3 with the parameters there too, and with both in NVMe files.
TEST(ExpertGroups, ZeroStagesTrainAsStageZero) {
  if (!four_ranks()) GTEST_SKIP() << "expert groups of 2 x 2 run on 4 ranks";
  for (const Precision precision : {Precision::Fp32, Precision::Bf16}) {
    Gpt2Setup base{.stage = 0, .grad_accumulation = 2, .precision = precision};
    base.optimizer = OptimizerType::Sgd;
    const ExpertRun reference = train_experts(expert_plan(base), base, kSteps);
    std::vector<Gpt2Setup> variants;
    for (const int stage : {1, 2, 3}) {
      Gpt2Setup s = base;
      s.stage = stage;
      variants.push_back(s);
    }
    if (precision == Precision::Bf16) {
      for (const int stage : {2, 3}) {
        Gpt2Setup s = base;
        s.stage = stage;
        s.offload_optimizer = true;
        variants.push_back(s);
      }
      Gpt2Setup params = variants.back();  // stage 3, the parameters on the host too
      params.offload_param = true;
      variants.push_back(params);
      Gpt2Setup nvme = base;  // ZeRO-Infinity: stage 3, optimizer and parameters in NVMe files
      nvme.stage = 3;
      nvme.offload_optimizer = nvme.offload_param = nvme.nvme = true;
      variants.push_back(nvme);
    }
    const bool fp32 = precision == Precision::Fp32;
    const Plan any = expert_plan(base);
    const auto specs = tensors_of(any.rank_model);
    const auto expected = split_tensors(any.rank_model, reference.trained.parameters);
    for (const Gpt2Setup& s : variants) {
      SCOPED_TRACE(name_of(s));
      const Plan plan = expert_plan(s);
      const ExpertRun run = train_experts(plan, s, kSteps);
      double worst_loss = 0;
      for (int step = 0; step < kSteps; ++step) {
        worst_loss = std::max(worst_loss, std::abs(run.trained.losses[std::size_t(step)] -
                                                   reference.trained.losses[std::size_t(step)]));
      }
      EXPECT_LE(worst_loss, fp32 ? 2e-4 : 2e-3);
      const auto mine = split_tensors(any.rank_model, run.trained.parameters);
      double worst = 0;
      for (std::size_t t = 0; t < specs.size(); ++t) {
        if (analytically_zero(*specs[t])) continue;
        const double difference = relative_difference(mine[t], expected[t]);
        worst = std::max(worst, difference);
        EXPECT_LE(difference, fp32 ? 1e-5 : 8.0 / 256) << specs[t]->name;
      }
      if (!s.offload_optimizer) expect_memory_of(plan.schedule, run.trained);
      if (world().rank() == 0)
        std::printf(
            "[ parity   ] %s with expert groups vs stage 0 with expert groups: losses %s, "
            "largest relative parameter difference %.3g\n",
            name_of(s).c_str(), loss_differences(run.trained, reference.trained).c_str(), worst);
    }
  }
}

// (b) Stage 0, one step of SGD (momentum's first step is the gradient itself: PyTorch's buffer
// starts as d_p) in fp32: an update is -lr x (g + wd x p0) with g the gradient averaged over the
// tensor's group. For an MLP ("expert") that group is {0, 2} or {1, 3}, so with g_r rank r's own
// gradient the two groups' updates are -lr ((g0 + g2) / 2 + wd p0) and -lr ((g1 + g3) / 2 + wd
// p0), and their sum is twice the update plain data parallelism over the 4 ranks makes from the
// same data, -lr ((g0 + g1 + g2 + g3) / 4 + wd p0), since one step's gradients depend on the
// initial parameters only. So: MLPs equal within {0, 2} and within {1, 3}, different between 0
// and 1, and (p_0 - p0) + (p_1 - p0) = 2 (p_plain - p0); every other tensor equal on all four
// ranks and equal to plain data parallelism's. (Averaging the experts over all 4 ranks would make
// ranks 0 and 1 equal; summing over 2 and dividing by 4 would halve the sum's gradient part.)
TEST(ExpertGroups, StageZeroAveragesExpertsOverTheirGroup) {
  if (!four_ranks()) GTEST_SKIP() << "expert groups of 2 x 2 run on 4 ranks";
  Gpt2Setup s{.stage = 0};
  s.optimizer = OptimizerType::Sgd;
  const Plan plan = expert_plan(s);
  const Plan plain = expert_plan(s, 1);
  ASSERT_EQ(plain.schedule.layout.expert_dp_size, 0);
  const ExpertRun experts = train_experts(plan, s, 1);
  const ExpertRun reference = train_experts(plain, s, 1);
  const ExpertRun initial = train_experts(plain, s, 0);
  const std::size_t size = experts.trained.parameters.size();
  const std::vector<float> all = gather_all(experts.trained.parameters);
  const auto specs = tensors_of(plan.rank_model);
  std::vector<std::vector<std::vector<float>>> ranks;
  for (int r = 0; r < 4; ++r)
    ranks.push_back(split_tensors(plan.rank_model, rank_part(all, size, r)));
  const auto p0 = split_tensors(plan.rank_model, initial.trained.parameters);
  const auto p_plain = split_tensors(plan.rank_model, reference.trained.parameters);
  int experts_checked = 0;
  for (std::size_t t = 0; t < specs.size(); ++t) {
    SCOPED_TRACE(specs[t]->name);
    if (!is_mlp(*specs[t])) {
      for (int r = 1; r < 4; ++r) EXPECT_EQ(ranks[std::size_t(r)][t], ranks[0][t]);
      if (!analytically_zero(*specs[t])) {
        EXPECT_LE(relative_difference(ranks[0][t], p_plain[t]), 1e-5);
      }
      continue;
    }
    ++experts_checked;
    EXPECT_EQ(ranks[2][t], ranks[0][t]);
    EXPECT_EQ(ranks[3][t], ranks[1][t]);
    EXPECT_GT(relative_difference(ranks[1][t], ranks[0][t]), 1e-4);
    std::vector<float> sum(p0[t].size()), twice(p0[t].size());
    for (std::size_t i = 0; i < sum.size(); ++i) {
      sum[i] = (ranks[0][t][i] - p0[t][i]) + (ranks[1][t][i] - p0[t][i]);
      twice[i] = 2 * (p_plain[t][i] - p0[t][i]);
    }
    EXPECT_LE(relative_difference(sum, twice), 1e-4);
  }
  EXPECT_EQ(experts_checked, 8);  // 2 blocks x fc_in, fc_out x weight, bias
}

// (c) The collectives each group ran over the steps are the schedule's: calls and bytes of every
// kind on the expert-data-parallel group (the MLPs' reductions, stage 1-2 gathers of their
// partitions, the norm's average) and on the data-parallel group (with fp16 the overflow flag's
// all-reduce too). Stage 3's layer gather is one
// op of the schedule over the data-parallel group whose expert tensors the engine gathers over
// their own group: there the two groups' gathered bytes add up to the schedule's.
TEST(ExpertGroups, EachGroupMovesTheScheduleBytes) {
  if (!four_ranks()) GTEST_SKIP() << "expert groups of 2 x 2 run on 4 ranks";
  for (const auto& [stage, precision] :
       std::vector<std::pair<int, Precision>>{{0, Precision::Bf16},
                                              {1, Precision::Bf16},
                                              {2, Precision::Bf16},
                                              {2, Precision::Fp16},
                                              {3, Precision::Bf16}}) {
    Gpt2Setup s{.stage = stage, .precision = precision};
    SCOPED_TRACE(name_of(s));
    const Plan plan = expert_plan(s);
    const ExpertRun run = train_experts(plan, s, kSteps);
    Bytes expert_bytes = 0;
    for (int k = 0; k < kOpKindCount; ++k) {
      const auto kind = std::size_t(k);
      SCOPED_TRACE(to_string(OpKind(k)));
      const bool split_gather = stage == 3 && OpKind(k) == OpKind::AllGather;
      expert_bytes += run.expert_data[kind].bytes;
      if (split_gather) {
        EXPECT_EQ(run.data[kind].bytes + run.expert_data[kind].bytes,
                  kSteps * (plan.comm.collectives[kind].bytes + plan.comm.expert_data[kind].bytes));
        continue;
      }
      EXPECT_EQ(run.expert_data[kind].bytes, kSteps * plan.comm.expert_data[kind].bytes);
      EXPECT_EQ(run.expert_data[kind].calls, kSteps * plan.comm.expert_data[kind].calls);
      EXPECT_EQ(run.data[kind].bytes, kSteps * plan.comm.collectives[kind].bytes);
    }
    EXPECT_GT(expert_bytes, 0);
    if (world().rank() == 0)
      std::printf("[ traffic  ] %s: the expert-data group moved %lld bytes in %d steps\n",
                  name_of(s).c_str(), static_cast<long long>(expert_bytes), kSteps);
  }
}

// EP 4 over 4 ranks: every rank holds its own experts (expert-data-parallel groups of one rank,
// DeepSpeed's ep_size == world size), so an MLP's gradient is the rank's own and stage 2 partitions
// it over one rank (the whole of it): stage 2 trains as stage 0, and the MLPs differ on every rank
// while the other tensors stay equal.
TEST(ExpertGroups, ExpertGroupsOfOneRank) {
  if (!four_ranks()) GTEST_SKIP() << "expert groups of 2 x 2 run on 4 ranks";
  Gpt2Setup base{.stage = 0};
  base.optimizer = OptimizerType::Sgd;
  Gpt2Setup zero2 = base;
  zero2.stage = 2;
  const Plan plan = expert_plan(zero2, 4);
  ASSERT_EQ(plan.schedule.layout.expert_dp_size, 1);
  const ExpertRun reference = train_experts(expert_plan(base, 4), base, kSteps);
  const ExpertRun run = train_experts(plan, zero2, kSteps);
  const auto specs = tensors_of(plan.rank_model);
  const auto mine = split_tensors(plan.rank_model, run.trained.parameters);
  const auto expected = split_tensors(plan.rank_model, reference.trained.parameters);
  const std::vector<float> all = gather_all(run.trained.parameters);
  const std::size_t size = run.trained.parameters.size();
  const auto next = split_tensors(plan.rank_model, rank_part(all, size, (world().rank() + 1) % 4));
  for (std::size_t t = 0; t < specs.size(); ++t) {
    SCOPED_TRACE(specs[t]->name);
    if (!analytically_zero(*specs[t])) {
      EXPECT_LE(relative_difference(mine[t], expected[t]), 1e-5);
    }
    if (is_mlp(*specs[t])) {
      EXPECT_GT(relative_difference(next[t], mine[t]), 1e-4);
    } else {
      EXPECT_EQ(next[t], mine[t]);
    }
  }
}

// The norm: with every tensor an expert, there are two independent trainings of 2 ranks each,
// {0, 2} and {1, 3}. Stage 0 takes the norm of the gradients a rank holds, its group's averaged
// gradient: n_0 on rank 0, n_1 on rank 1. DeepSpeed's ZeRO 1-2 all-reduces an expert group's
// partial sums over the whole DP group (get_grad_norm_direct) and averages that norm over the
// expert-data group (_average_expert_grad_norms), so its norm counts both groups' experts once:
// sqrt(n_0^2 + n_1^2), on every rank (stages 1-3 train as stage 0 does, so at every step). Summing
// the norm over the expert-data group instead of averaging it would give sqrt(2) times that.
// Clipping to 0.3 of the first norm (active) then trains stages 2 and 3 as stage 1.
TEST(ExpertGroups, NormCountsEachExpertOnce) {
  if (!four_ranks()) GTEST_SKIP() << "expert groups of 2 x 2 run on 4 ranks";
  Gpt2Setup base{.stage = 0};
  base.optimizer = OptimizerType::Sgd;
  const ExpertRun stage0 =
      train_experts(expert_plan(base, kExpertParallel, Experts::Everything), base, kSteps);
  const std::vector<float> norms(stage0.grad_norms.begin(), stage0.grad_norms.end());
  const std::vector<float> all = gather_all(norms);
  std::vector<float> clipped_parameters;
  double clip = 0;
  for (const int stage : {1, 2, 3}) {
    Gpt2Setup s = base;
    s.stage = stage;
    SCOPED_TRACE(name_of(s));
    const ExpertRun run =
        train_experts(expert_plan(s, kExpertParallel, Experts::Everything), s, kSteps);
    for (int step = 0; step < kSteps; ++step) {
      const double n0 = all[std::size_t(step)], n1 = all[std::size_t(kSteps + step)];
      const double expected = std::sqrt(n0 * n0 + n1 * n1);
      EXPECT_NEAR(run.grad_norms[std::size_t(step)], expected, 1e-5 * expected) << "step " << step;
      if (world().rank() == 0 && stage == 1)
        std::printf("[ norm     ] step %d: n_0 %.6f n_1 %.6f, ZeRO-1 with expert groups %.6f\n",
                    step, n0, n1, run.grad_norms[std::size_t(step)]);
    }
    Plan clipped_plan = expert_plan(s, kExpertParallel, Experts::Everything);
    if (stage == 1) clip = 0.3 * run.grad_norms[0];
    clipped_plan.request.config.gradient_clipping = clip;
    const ExpertRun clipped = train_experts(clipped_plan, s, kSteps);
    if (stage == 1) {
      clipped_parameters = clipped.trained.parameters;
      EXPECT_GT(relative_difference(clipped_parameters, run.trained.parameters), 1e-3);
    } else {
      EXPECT_LE(relative_difference(clipped.trained.parameters, clipped_parameters), 1e-5);
    }
  }
}

// `zerolens run`'s training loop (train_gpt2, which builds the groups from the plan's context)
// counts each group's collectives of the last step, and its measured trace records the
// expert-data-parallel and expert-parallel groups' (what validate and check-measured hold to the
// plan): here the schedule's, and no all-to-all (the flagged MLPs exchange nothing), through the
// trace's JSON and back.
TEST(ExpertGroups, MeasuredTraceCountsTheExpertGroups) {
  if (!four_ranks()) GTEST_SKIP() << "expert groups of 2 x 2 run on 4 ranks";
  const Gpt2Setup s{.stage = 2, .precision = Precision::Bf16};
  const Plan plan = expert_plan(s);
  const TrainingResult result = train_gpt2(plan, world(), {.steps = 2});
  const Trace trace = trace_from_json(trace_to_json(measured_trace(plan, result)));
  ASSERT_TRUE(trace.summary.expert_data_collectives.has_value());
  ASSERT_TRUE(trace.summary.expert_parallel_collectives.has_value());
  for (int k = 0; k < kOpKindCount; ++k) {
    SCOPED_TRACE(to_string(OpKind(k)));
    const auto kind = std::size_t(k);
    EXPECT_EQ((*trace.summary.expert_data_collectives)[kind].bytes,
              plan.comm.expert_data[kind].bytes);
    EXPECT_EQ((*trace.summary.expert_data_collectives)[kind].calls,
              plan.comm.expert_data[kind].calls);
    EXPECT_EQ((*trace.summary.expert_parallel_collectives)[kind].calls, 0);
    EXPECT_EQ((*trace.summary.collectives)[kind].bytes, plan.comm.collectives[kind].bytes);
  }
  EXPECT_GT(plan.comm.expert_data[std::size_t(OpKind::ReduceScatter)].bytes, 0);
}

// What the engine does not run with expert groups is refused by name before it runs.
TEST(ExpertGroups, RefusesWhatItDoesNotRun) {
  const auto refusal = [](const Plan& plan) {
    try {
      check_engine_supports(plan);
    } catch (const InputError& error) {
      return error.where();
    }
    return std::string("(accepted)");
  };
  Gpt2Setup fp16{.stage = 0, .precision = Precision::Fp16};
  EXPECT_EQ(refusal(expert_plan(fp16)), "--precision");
  fp16.stage = 1;
  EXPECT_EQ(refusal(expert_plan(fp16)), "(accepted)");
  Plan clipped = expert_plan({.stage = 0});
  clipped.request.config.gradient_clipping = 1.0;
  EXPECT_EQ(refusal(clipped), "gradient_clipping");
  Plan stage1 = expert_plan({.stage = 1});
  stage1.request.config.gradient_clipping = 1.0;
  EXPECT_EQ(refusal(stage1), "(accepted)");
  EXPECT_EQ(refusal(expert_plan({.stage = 3, .hpz = 2})), "--ep");
  // Checkpoints: before the run starts.
  TrainingOptions save;
  save.save_directory = "unused";
  try {
    check_runnable(expert_plan({.stage = 2}), save, 4);
    ADD_FAILURE() << "a checkpoint of an expert-parallel run was accepted";
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "--save");
  }
}

}  // namespace
}  // namespace zerolens::exec
