// A pipeline on CPU ranks (sim/timeline/cpu_pipeline.hpp) against a case worked by hand: the ranks
// at work share the node's cores, the ranks waiting in a receive (the bubbles) do not.
#include <gtest/gtest.h>

#include "sim/timeline/cpu_pipeline.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

constexpr double ms = 1e-3;

// One generic layer per stage, 1 token per micro-step, 2000 forward FLOPs at 1 us per FLOP:
// a forward takes 2 ms and a backward 4 ms alone on the node.
Model one_layer_model() {
  Model model = testing::flat_model(1, 10);
  model.layers[0].matmul_flops_per_token = 2000;
  return model;
}

// Two stages of one rank each on a node of one core: with one rank at work it has the core,
// with both each has half (the ideal share, nothing measured).
Cluster one_core_cluster() {
  Cluster cluster = testing::test_cluster(2);
  cluster.node.cpu_cores = 1;
  ClusterCalibration c;
  c.device = "cpu";
  c.ranks = 2;
  c.forward[std::size_t(LayerKind::TransformerBlock)] = {1e-6, 0, 0};
  c.backward[std::size_t(LayerKind::TransformerBlock)] = {1e-6, 0, 0};
  cluster.calibration = c;
  return cluster;
}

Op compute(OpKind kind, int micro) {
  Op op;
  op.kind = kind;
  op.stream = Stream::Compute;
  op.phase = kind == OpKind::Forward ? Phase::Forward : Phase::Backward;
  op.micro_step = micro;
  op.layer = 0;
  return op;
}

Op transfer(OpKind kind, Phase phase, int micro, int peer, int chunk) {
  Op op;
  op.kind = kind;
  op.stream = Stream::Compute;
  op.phase = phase;
  op.micro_step = micro;
  op.peer_stage = peer;
  op.chunk = chunk;
  return op;
}

Schedule stage_schedule(std::vector<Op> ops) {
  Schedule schedule;
  schedule.context.dp_size = 1;
  schedule.context.pipeline_parallel = 2;
  schedule.context.gpus_per_node = 2;
  schedule.context.micro_batch = 1;
  schedule.context.seq_len = 1;
  schedule.ops = std::move(ops);
  return schedule;
}

// 1F1B over 2 micro-batches, forward F = 2 ms and backward B = 4 ms alone, worked by hand (ms):
//   0-2    stage 0: F(m0) alone;                                   sends it at 2
//   2-6    stage 0: F(m1), stage 1: F(m0), both at half speed;     stage 0 sends F(m1) at 6
//   6-10   stage 1: B(m0) alone (stage 0 waits for it);            sends it at 10
//   10-14  stage 0: B(m0), stage 1: F(m1) at half: F(m1) ends, B(m0) has 2 ms of work left
//   14-18  stage 0: B(m0)'s last 2, stage 1: B(m1) at half: B(m0) ends, B(m1) has 2 left
//   18-20  stage 1: B(m1) alone;                                    sends it at 20
//   20-24  stage 0: B(m1) alone.
// Every rank at half speed throughout (the share of all the node's ranks) would give 48.
TEST(CpuPipeline, RanksWaitingInReceivesLeaveTheCoresToTheOthers) {
  using enum OpKind;
  const Schedule first = stage_schedule(
      {compute(Forward, 0), transfer(Send, Phase::Forward, 0, 1, 0), compute(Forward, 1),
       transfer(Send, Phase::Forward, 1, 1, 0), transfer(Recv, Phase::Backward, 0, 1, 1),
       compute(Backward, 0), transfer(Recv, Phase::Backward, 1, 1, 1), compute(Backward, 1)});
  const Schedule second = stage_schedule(
      {transfer(Recv, Phase::Forward, 0, 0, 0), compute(Forward, 0), compute(Backward, 0),
       transfer(Send, Phase::Backward, 0, 0, 1), transfer(Recv, Phase::Forward, 1, 0, 0),
       compute(Forward, 1), compute(Backward, 1), transfer(Send, Phase::Backward, 1, 0, 1)});
  const Model model = one_layer_model();
  const std::vector<const Schedule*> stages = {&first, &second};
  const std::vector<const Model*> models = {&model, &model};
  const auto timings = simulate_cpu_pipeline(stages, models, one_core_cluster());
  ASSERT_EQ(timings.size(), 2u);
  const auto expect = [](const OpTiming& timing, double start, double end) {
    EXPECT_NEAR(timing.start, start * ms, 1e-12);
    EXPECT_NEAR(timing.end(), end * ms, 1e-12);
  };
  expect(timings[0][0], 0, 2);    // F(m0)
  expect(timings[0][2], 2, 6);    // F(m1)
  expect(timings[0][4], 6, 10);   // waits for B(m0)
  expect(timings[0][5], 10, 18);  // B(m0)
  expect(timings[0][6], 18, 20);  // waits for B(m1)
  expect(timings[0][7], 20, 24);  // B(m1)
  expect(timings[1][0], 0, 2);    // waits for F(m0)
  expect(timings[1][1], 2, 6);    // F(m0)
  expect(timings[1][2], 6, 10);   // B(m0)
  expect(timings[1][5], 10, 14);  // F(m1)
  expect(timings[1][6], 14, 20);  // B(m1)
}

// A receive whose send no stage makes is a logic error, not a hang.
TEST(CpuPipeline, AReceiveNoStageSendsIsAnError) {
  const Schedule first = stage_schedule({transfer(OpKind::Recv, Phase::Backward, 0, 1, 1)});
  const Schedule second = stage_schedule({compute(OpKind::Forward, 0)});
  const Model model = one_layer_model();
  const std::vector<const Schedule*> stages = {&first, &second};
  const std::vector<const Model*> models = {&model, &model};
  EXPECT_THROW(simulate_cpu_pipeline(stages, models, one_core_cluster()), std::logic_error);
}

}  // namespace
}  // namespace zerolens
