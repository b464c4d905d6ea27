// Pipeline parallelism (issue 20): stage splits, the schedules' orders against their papers'
// in-flight counts, each stage's activations, sends, receives and tied-embedding reduction worked
// by hand, the bubble of the joint timeline, and TP 2 x PP 2 x DP 2 worked on paper.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "sim/config/overrides.hpp"
#include "sim/plan/variants.hpp"
#include "sim/predict/prediction.hpp"
#include "sim/schedule/comm.hpp"
#include "sim/schedule/memory_replay.hpp"
#include "sim/schedule/pipeline_order.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

TransformerShape tiny_shape(int blocks) { return testing::hand_worked_shape(blocks); }

TrainingConfig pp_config(int stages, std::int64_t micro_batches,
                         PipelineSchedule schedule = PipelineSchedule::OneFOneB, int chunks = 1) {
  TrainingConfig config;
  config.zero.stage = 1;
  config.precision.precision = Precision::Bf16;
  config.batch.micro_batch_per_gpu = 2;
  config.batch.gradient_accumulation_steps = micro_batches;
  config.seq_len = 16;
  config.pipeline = {.size = stages, .virtual_stages = chunks, .schedule = schedule};
  return config;
}

PlanRequest request_of(const Model& model, const TrainingConfig& config, int dp) {
  PlanRequest request;
  request.model = model;
  request.config = config;
  request.dp_size = dp;
  const std::int64_t world = std::int64_t(dp) * config.tensor_parallel.size * config.pipeline.size;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), int(world), 0);
  return request;
}

Bytes stored(const Model& model, const std::string& layer) {
  for (const auto& l : model.layers) {
    if (l.name == layer) return l.activation_bytes(2, 16, 2).stored;
  }
  throw std::out_of_range(layer);
}

Bytes peak_stored_activations(const Schedule& schedule) {
  Bytes peak = 0;
  for (const auto& state : replay_memory_components(schedule)) {
    peak =
        std::max(peak, state[std::size_t(Device::Gpu)][std::size_t(Component::ActivationsStored)]);
  }
  return peak;
}

std::vector<std::string> names(const Model& model) {
  std::vector<std::string> out;
  for (const auto& layer : model.layers) out.push_back(layer.name);
  return out;
}

// Megatron's layout: equal block chunks, the embedding before the first, the final norm and the
// LM head (with its own copy of the tied word embeddings) after the last.
TEST(PipelineParallel, StagesSplitTheBlocksAndCopyTheTiedEmbedding) {
  const Model model = build_transformer("tiny", tiny_shape(4));
  const Model first = pipeline_stage_model(model, {.size = 2}, 0);
  const Model last = pipeline_stage_model(model, {.size = 2}, 1);
  EXPECT_EQ(names(first), (std::vector<std::string>{"embedding", "h.0", "h.1"}));
  EXPECT_EQ(names(last), (std::vector<std::string>{"h.2", "h.3", "ln_f", "lm_head"}));
  // A block holds 872 parameters (test_tensor_parallel.cpp); wte 800, wpe 128, ln_f 16.
  EXPECT_EQ(first.parameter_count(), 800 + 128 + 2 * 872);
  EXPECT_EQ(last.parameter_count(), 2 * 872 + 16 + 800);
  EXPECT_TRUE(first.tied_embedding_end);
  EXPECT_TRUE(last.tied_embedding_end);
  // Interleaved: chunk g on stage g mod 2.
  const Model chunked = pipeline_stage_model(
      model, {.size = 2, .virtual_stages = 2, .schedule = PipelineSchedule::Interleaved}, 1);
  EXPECT_EQ(names(chunked), (std::vector<std::string>{"h.1", "h.3", "ln_f", "lm_head"}));
  ASSERT_EQ(chunked.pipeline_chunks.size(), 2u);
  EXPECT_EQ(chunked.pipeline_chunks[1].global_index, 3);
  EXPECT_THROW(pipeline_stage_model(model, {.size = 3}, 0), InputError);  // 4 blocks, 3 stages
}

// Every micro-batch's chunk runs forward once and backward once, its forward first.
void expect_complete(const std::vector<PipelineUnit>& units, int micro_batches, int chunks) {
  std::map<std::pair<int, int>, int> forward_at;
  std::set<std::pair<int, int>> backward;
  for (std::size_t i = 0; i < units.size(); ++i) {
    const auto key = std::make_pair(units[i].micro, units[i].chunk);
    if (units[i].forward) {
      EXPECT_TRUE(forward_at.emplace(key, int(i)).second);
    } else {
      EXPECT_TRUE(forward_at.count(key)) << "backward before forward";
      EXPECT_TRUE(backward.insert(key).second);
    }
  }
  EXPECT_EQ(forward_at.size(), std::size_t(micro_batches * chunks));
  EXPECT_EQ(backward.size(), std::size_t(micro_batches * chunks));
}

int most_in_flight(const std::vector<PipelineUnit>& units) {
  int live = 0, most = 0;
  for (const auto& unit : units) {
    live += unit.forward ? 1 : -1;
    most = std::max(most, live);
  }
  return most;
}

// 1F1B keeps min(pp - stage, m) micro-batches in flight (Narayanan et al. 2021); GPipe all m;
// interleaved 1F1B's first stage pp + (pp - 1)/v micro-batches, i.e. v pp + pp - 1 chunk-units
// (Korthikanti et al. 2022, Sec. 4.2.3).
TEST(PipelineParallel, OrdersKeepThePapersInFlightCounts) {
  for (const int stage : {0, 1, 2, 3}) {
    const auto units = pipeline_order({.size = 4}, stage, 8);
    expect_complete(units, 8, 1);
    EXPECT_EQ(most_in_flight(units), 4 - stage);
    EXPECT_EQ(most_in_flight(pipeline_order({.size = 4}, stage, 2)), std::min(4 - stage, 2));
    EXPECT_EQ(
        most_in_flight(pipeline_order({.size = 4, .schedule = PipelineSchedule::GPipe}, stage, 8)),
        8);
  }
  for (const int chunks : {2, 3, 4}) {
    const PipelineParallelism interleaved{
        .size = 4, .virtual_stages = chunks, .schedule = PipelineSchedule::Interleaved};
    const auto units = pipeline_order(interleaved, 0, 16);
    expect_complete(units, 16, chunks);
    EXPECT_EQ(most_in_flight(units), chunks * 4 + 4 - 1) << chunks;
  }
  EXPECT_THROW(
      pipeline_order({.size = 4, .virtual_stages = 2, .schedule = PipelineSchedule::Interleaved}, 0,
                     6),
      InputError);
}

// The planned stage is the one with the highest GPU peak, and each stage keeps its in-flight
// micro-batches' activations: with 4 micro-batches over 2 stages, 1F1B keeps 2 on stage 0 and 1
// on stage 1; GPipe keeps all 4 on both.
TEST(PipelineParallel, EachStageKeepsItsInFlightActivations) {
  const Model model = build_transformer("tiny", tiny_shape(4));
  const Bytes first = stored(model, "embedding") + stored(model, "h.0") + stored(model, "h.1");
  const Bytes last = stored(model, "h.2") + stored(model, "h.3") + stored(model, "ln_f") +
                     stored(model, "lm_head");
  const Plan one_f = make_plan(request_of(model, pp_config(2, 4), 1));
  ASSERT_EQ(one_f.pipeline_stages.size(), 2u);
  EXPECT_EQ(peak_stored_activations(one_f.pipeline_stages[0].schedule), 2 * first);
  EXPECT_EQ(peak_stored_activations(one_f.pipeline_stages[1].schedule), last);
  const Plan gpipe = make_plan(request_of(model, pp_config(2, 4, PipelineSchedule::GPipe), 1));
  EXPECT_EQ(peak_stored_activations(gpipe.pipeline_stages[0].schedule), 4 * first);
  EXPECT_EQ(peak_stored_activations(gpipe.pipeline_stages[1].schedule), 4 * last);
  // The plan reports its worst stage.
  const auto worst = std::max_element(one_f.pipeline_stages.begin(), one_f.pipeline_stages.end(),
                                      [](const auto& a, const auto& b) {
                                        return std::pair(a.gpu_device_used, a.gpu_allocated) <
                                               std::pair(b.gpu_device_used, b.gpu_allocated);
                                      });
  EXPECT_EQ(one_f.pipeline_stage, int(worst - one_f.pipeline_stages.begin()));
  EXPECT_EQ(one_f.device(Device::Gpu).peak_per_rank, worst->gpu_device_used);
  EXPECT_EQ(one_f.gpu.allocated, worst->gpu_allocated);
}

// 4 micro-batches of 2 x 16 tokens, hidden 8, bf16: 512 bytes at the stage boundary each way.
// Stage 0 sends 4 activations and receives 4 gradients; the two ends of the tied embedding
// all-reduce its 800 bf16 gradients (1,600 bytes) over their 2 ranks, before the data-parallel
// reduction (DeepSpeed's ReduceTiedGrads, then ReduceGrads); the norm's 4 bytes are summed over
// the 2 stages.
TEST(PipelineParallel, SendsReceivesAndTheEmbeddingGroupWorkedByHand) {
  const Plan plan =
      make_plan(request_of(build_transformer("tiny", tiny_shape(4)), pp_config(2, 4), 1));
  for (const int stage : {0, 1}) {
    const CommReport comm = summarize_comm(plan.pipeline_stages[std::size_t(stage)].schedule);
    EXPECT_EQ(comm.pipeline[std::size_t(OpKind::Send)].calls, 4);
    EXPECT_EQ(comm.pipeline[std::size_t(OpKind::Send)].bytes, 4 * 512);
    EXPECT_EQ(comm.pipeline[std::size_t(OpKind::Recv)].calls, 4);
    EXPECT_EQ(comm.pipeline[std::size_t(OpKind::Recv)].traffic_bytes, 0);
    EXPECT_EQ(comm.pipeline[std::size_t(OpKind::AllReduce)].bytes, 800 * 2);
    EXPECT_EQ(comm.pipeline[std::size_t(OpKind::GradNorm)].bytes, 4);
    // Both stages sit in one 8-GPU node: a send's bytes, the 2-rank all-reduces' 1 x message.
    EXPECT_EQ(comm.links.intra_node, 4 * 512 + 800 * 2 + 4);
    const auto& ops = plan.pipeline_stages[std::size_t(stage)].schedule.ops;
    const auto first = [&](OpKind kind, ProcessGroup group) {
      return std::find_if(ops.begin(), ops.end(),
                          [&](const Op& op) { return op.kind == kind && op.group == group; }) -
             ops.begin();
    };
    EXPECT_LT(first(OpKind::AllReduce, ProcessGroup::Pipeline),
              first(OpKind::ReduceScatter, ProcessGroup::Data));
  }
}

// Every stage of the norm's reduction: 4 stages of 4 ranks each (DP 4) on 8-GPU nodes: stages 0
// and 1 share a node, 2 and 3 the next: the 4-rank all-reduce of 4 bytes runs 2 per node over 2
// (with DP 2 all 8 ranks share one node: 4 on 1).
TEST(PipelineParallel, TheNormIsSummedOverEveryStage) {
  const Plan one_node =
      make_plan(request_of(build_transformer("tiny", tiny_shape(4)), pp_config(4, 4), 2));
  const Op& whole =
      *std::find_if(one_node.schedule.ops.begin(), one_node.schedule.ops.end(), [](const Op& op) {
        return op.kind == OpKind::GradNorm && op.group == ProcessGroup::Pipeline;
      });
  EXPECT_EQ(op_group_shape(whole, one_node.schedule.context).ranks_per_node, 4);
  EXPECT_EQ(op_group_shape(whole, one_node.schedule.context).nodes, 1);
  const Plan plan =
      make_plan(request_of(build_transformer("tiny", tiny_shape(4)), pp_config(4, 4), 4));
  const Schedule& schedule = plan.pipeline_stages[1].schedule;
  const auto norm = std::find_if(schedule.ops.begin(), schedule.ops.end(), [](const Op& op) {
    return op.kind == OpKind::GradNorm && op.group == ProcessGroup::Pipeline;
  });
  ASSERT_NE(norm, schedule.ops.end());
  EXPECT_EQ(norm->group_size, 4);
  const GroupShape shape = op_group_shape(*norm, schedule.context);
  EXPECT_EQ(shape.ranks_per_node, 2);
  EXPECT_EQ(shape.nodes, 2);
}

// With 8 ranks per node and DP 8, stage 1's ranks are on the next node: the send crosses it.
TEST(PipelineParallel, StagesOnOtherNodesSendOverTheNetwork) {
  const Plan plan =
      make_plan(request_of(build_transformer("tiny", tiny_shape(4)), pp_config(2, 4), 8));
  const CommReport comm = summarize_comm(plan.pipeline_stages[0].schedule);
  EXPECT_EQ(comm.links.inter_node, 4 * 512 + 800 * 2 + 4);  // sends, tied embedding, norm
}

// Stages of equal work, links far faster than compute: 1F1B's last backward ends after
// (m + pp - 1) units of one micro-batch's forward and backward (the bubble is pp - 1 of them).
TEST(PipelineParallel, TheJointTimelineHasTheBubble) {
  TransformerShape shape = tiny_shape(8);
  shape.hidden = 1024;
  shape.heads = 16;
  shape.kv_heads = 16;
  shape.ffn_hidden = 4096;
  shape.vocab = 16;
  shape.max_positions = 512;
  TrainingConfig config = pp_config(4, 8);
  config.zero.stage = 0;
  config.seq_len = 512;
  PlanRequest request = request_of(build_transformer("even", shape), config, 1);
  request.cluster.node.intra_node.bandwidth = 1e18;
  request.cluster.node.intra_node.latency = 0;
  const Prediction prediction = predict(request);
  const Plan& plan = prediction.plan;
  std::vector<const Schedule*> schedules;
  std::vector<MemoryTimeline> replays;
  for (const auto& stage : plan.pipeline_stages) {
    schedules.push_back(&stage.schedule);
    replays.push_back(replay_memory(stage.schedule, ReplayDetail::PerOp));
  }
  const auto timelines = simulate_pipeline(schedules, plan.request.cluster, {}, replays);
  double unit = 0, last_backward = 0;
  for (std::size_t s = 0; s < timelines.size(); ++s) {
    double compute = 0;
    for (std::size_t i = 0; i < schedules[s]->ops.size(); ++i) {
      const Op& op = schedules[s]->ops[i];
      if (op.kind == OpKind::Forward || op.kind == OpKind::Backward) {
        compute += timelines[s].ops[i].duration;
        if (op.kind == OpKind::Backward)
          last_backward = std::max(last_backward, timelines[s].ops[i].end());
      }
    }
    unit = std::max(unit, compute / 8);
  }
  EXPECT_NEAR(last_backward, (8 + 4 - 1) * unit, 0.03 * last_backward);
  EXPECT_GT(last_backward, 8 * unit * 1.2);
  EXPECT_DOUBLE_EQ(prediction.timeline.step_time,
                   timelines[std::size_t(plan.pipeline_stage)].step_time);
}

// TP 2 x PP 2 x DP 2 of two blocks, 2 micro-batches of 2 x 16 tokens, bf16, ZeRO-1, worked on
// paper. Stage 0 holds the embedding (wte 128 x 8 of the padded vocabulary, wpe 128) and h.0 (460):
// 1,612 parameters; stage 1 h.1, ln_f and the LM head's copy of wte: 460 + 16 + 1,024 = 1,500.
TEST(PipelineParallel, TensorPipelineAndDataParallelWorkedOnPaper) {
  TrainingConfig config = pp_config(2, 2);
  config.tensor_parallel = {.size = 2};
  const Plan plan = make_plan(request_of(build_transformer("tiny", tiny_shape(2)), config, 2));
  ASSERT_EQ(plan.pipeline_stages.size(), 2u);
  EXPECT_EQ(plan.pipeline_stages[0].model.parameter_count(), 1612);
  EXPECT_EQ(plan.pipeline_stages[1].model.parameter_count(), 1500);
  const auto highs = category_highs(plan.pipeline_stages[0].schedule);
  const auto& gpu = highs[std::size_t(Device::Gpu)];
  EXPECT_EQ(gpu[std::size_t(Category::Params)], 1612 * 2);            // bf16, whole
  EXPECT_EQ(gpu[std::size_t(Category::MasterParams)], 1612 / 2 * 4);  // ZeRO-1 over DP 2
  EXPECT_EQ(gpu[std::size_t(Category::OptimizerStates)], 1612 / 2 * 8);
  // TP all-reduces of 512 bytes per micro-batch: stage 0 the embedding's output and h.0's two in
  // forward, h.0's two in backward; stage 1 h.1's two, the loss's three of 2 x 16 fp32 (128
  // bytes), h.1's two and the LM head's input gradient.
  const CommReport first = summarize_comm(plan.pipeline_stages[0].schedule);
  const CommReport last = summarize_comm(plan.pipeline_stages[1].schedule);
  EXPECT_EQ(first.tensor_parallel[std::size_t(OpKind::AllReduce)].calls, 2 * 5);
  EXPECT_EQ(first.tensor_parallel[std::size_t(OpKind::AllReduce)].bytes, 2 * 5 * 512);
  EXPECT_EQ(last.tensor_parallel[std::size_t(OpKind::AllReduce)].calls, 2 * 8);
  EXPECT_EQ(last.tensor_parallel[std::size_t(OpKind::AllReduce)].bytes, 2 * (5 * 512 + 3 * 128));
  // DP (ZeRO-1): the stage's bf16 gradients reduce-scattered and its parameters all-gathered.
  EXPECT_EQ(first.of(OpKind::ReduceScatter).bytes, 1612 * 2);
  EXPECT_EQ(first.of(OpKind::AllGather).bytes, 1612 * 2);
  // Pipeline: 2 activations sent; the tied embedding's 1,024 bf16 gradients all-reduced.
  EXPECT_EQ(first.pipeline[std::size_t(OpKind::Send)].bytes, 2 * 512);
  EXPECT_EQ(first.pipeline[std::size_t(OpKind::AllReduce)].bytes, 1024 * 2);
  // 8 ranks in one node: every byte stays inside it.
  EXPECT_EQ(first.links.inter_node, 0);
}

TEST(PipelineParallel, ConfigReadsStagesAndRefusesWhatDeepSpeedRefuses) {
  Diagnostics diagnostics;
  const auto config = parse_training_config(
      nlohmann::json::parse(
          R"({"pipeline": {"stages": 4, "partition": "parameters"}, "zero_optimization": {"stage": 1}})"),
      diagnostics);
  EXPECT_EQ(config.pipeline.size, 4);
  EXPECT_EQ(config.pipeline.schedule, PipelineSchedule::OneFOneB);
  const auto automatic = parse_training_config(
      nlohmann::json::parse(R"({"pipeline": {"stages": "auto"}})"), diagnostics);
  EXPECT_EQ(automatic.pipeline.size, 1);
  auto refused = [&](const char* text, const std::string& key) {
    try {
      parse_training_config(nlohmann::json::parse(text), diagnostics);
      ADD_FAILURE() << text;
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find(key), std::string::npos) << error.what();
    }
  };
  refused(R"({"pipeline": {"stages": 2}, "zero_optimization": {"stage": 2}})",
          "zero_optimization.stage");
  refused(R"({"pipeline": {"stages": 2, "virtual_stages": 2}})", "--virtual-stages");
  refused(R"({"pipeline": {"stages": 0}})", "pipeline.stages");
  // --virtual-stages alone picks the interleaved schedule.
  TrainingConfig edited;
  apply_overrides(edited, ConfigOverrides{.pipeline_parallel = 2, .virtual_stages = 2},
                  diagnostics);
  EXPECT_EQ(edited.pipeline.schedule, PipelineSchedule::Interleaved);
}

}  // namespace
}  // namespace zerolens

namespace zerolens {
namespace {

// Under pipeline parallelism --compare plans what DeepSpeed's pipeline engine runs (stages 0 and 1,
// ZeRO-1 with the optimizer on the CPU) and leaves out the 7 stage-2/3 variants with the planner's
// reason, each one planned alone refused by the same words; FSDP's variants, all of them refused,
// are the job's error.
TEST(PipelineParallel, CompareLeavesOutTheVariantsThePipelineRefuses) {
  const PlanRequest base = request_of(build_transformer("tiny", tiny_shape(4)), pp_config(2, 4), 2);
  const VariantComparison comparison = compare_variants(base);
  std::vector<std::string> planned, left_out;
  for (const auto& [variant, plan] : comparison.plans) {
    planned.push_back(variant.label);
    EXPECT_LE(plan.schedule.context.stage, 1) << variant.label;
    EXPECT_EQ(plan.pipeline_stages.size(), 2u) << variant.label;
  }
  EXPECT_EQ(planned, (std::vector<std::string>{"DP", "ZeRO-1", "ZeRO-1 + opt:cpu"}));
  for (const auto& [variant, reason] : comparison.left_out) {
    left_out.push_back(variant.label);
    EXPECT_GE(variant.stage, 2) << variant.label;
    PlanRequest alone = base;
    alone.config = apply_variant(base.config, variant);
    try {
      make_plan(alone);
      ADD_FAILURE() << variant.label << " was planned";
    } catch (const InputError& error) {
      EXPECT_EQ(reason, error.what());
    }
    EXPECT_NE(reason.find("zero_optimization.stage"), std::string::npos) << reason;
  }
  EXPECT_EQ(left_out.size() + planned.size(), standard_variants().size());
  // --max-model leaves out the same variants and searches the others.
  const MaxModelSearch search = find_max_models(base, "gpt2");
  ASSERT_EQ(search.variants.size(), planned.size());
  for (std::size_t i = 0; i < planned.size(); ++i)
    EXPECT_EQ(search.variants[i].variant.label, planned[i]);
  ASSERT_EQ(search.left_out.size(), comparison.left_out.size());
  for (std::size_t i = 0; i < search.left_out.size(); ++i)
    EXPECT_EQ(search.left_out[i].reason, comparison.left_out[i].reason);
  PlanRequest fsdp = base;
  fsdp.config.framework = Framework::Fsdp2;
  EXPECT_THROW(compare_variants(fsdp), InputError);
}

// Settings that would be ignored are refused by name: chunks without stages, SP without TP, and a
// layer list whose layers are not its shape's.
TEST(PipelineParallel, SettingsThatWouldBeIgnoredAreRefused) {
  Diagnostics diagnostics;
  TrainingConfig config;
  apply_overrides(config, ConfigOverrides{.virtual_stages = 2}, diagnostics);
  EXPECT_THROW(config.validate(), InputError);
  TrainingConfig sp;
  apply_overrides(sp, ConfigOverrides{.sequence_parallel = true}, diagnostics);
  EXPECT_THROW(sp.validate(), InputError);
  TrainingConfig gui = sp;  // the GUI's TP box back at 1 takes SP with it
  apply_overrides(gui, ConfigOverrides{.tensor_parallel = 1}, diagnostics, std::nullopt,
                  OverridePolicy::Interactive);
  EXPECT_NO_THROW(gui.validate());
  Model reordered = build_transformer("tiny", tiny_shape(4));
  std::swap(reordered.layers.front(), reordered.layers.back());
  EXPECT_THROW(pipeline_stage_model(reordered, {.size = 2}, 0), InputError);
}

}  // namespace
}  // namespace zerolens
