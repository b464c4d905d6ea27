// The memory the executor holds after every op of a step, against the plan's running memory at the
// same op (not only at the peak): a gradient the plan frees too early or too late shows at the ops
// between, even where the peak is reached elsewhere. The model is GPT-2 with a vocabulary large
// enough that its tied embedding's gradient outweighs the blocks' and exceeds a reduce bucket.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "exec/engine/zero_engine.hpp"
#include "exec/model/gpt2_model.hpp"
#include "gpt2_setup.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens::exec {
namespace {

// This file's own communicator, as every MPI test file has one: counts start from zero here.
Communicator& world() {
  static const std::unique_ptr<Communicator> communicator = make_mpi_communicator();
  return *communicator;
}

using testing::Gpt2Setup;
using testing::name_of;

// gpt2-tiny's blocks with 4096 tokens: the embedding holds about 3/4 of the parameters and its
// 262,144-element wte is larger than the setup's reduce bucket, the blocks' tensors fit in one.
Plan large_vocabulary_plan(const Gpt2Setup& setup) {
  PlanRequest request = testing::gpt2_plan(setup, world().size()).request;
  TransformerShape shape = *request.model.shape;
  shape.vocab = 4096;
  request.model = build_transformer("gpt2-tiny-vocab-4096", shape);
  return make_plan(std::move(request));
}

// Memory outside the activations, per device and component. Activations are left out: the
// executor keeps a few small arrays sim does not count (layernorm statistics, token ids), which the
// peak tests of mpi_test_gpt2.cpp bound.
using DeviceComponents = std::array<ComponentBytes, kDeviceCount>;

DeviceComponents without_activations(DeviceComponents memory) {
  for (auto& components : memory) {
    for (int c = 0; c < kComponentCount; ++c) {
      if (category_of(Component(c)) == Category::Activations) components[std::size_t(c)] = 0;
    }
  }
  return memory;
}

DeviceComponents measured_now(const MemoryLedger& ledger) {
  DeviceComponents memory{};
  for (int d = 0; d < kDeviceCount; ++d) {
    for (int c = 0; c < kComponentCount; ++c) {
      memory[std::size_t(d)][std::size_t(c)] = ledger.current(Device(d), Component(c));
    }
  }
  return without_activations(memory);
}

// Where the executor departs from DeepSpeed (and so from the plan), per op, in bytes it holds more:
// - it copies a gradient into the reduce bucket when the bucket is reduced, DeepSpeed's hook when
//   the gradient is complete, for every gradient that fits in a bucket (contiguous_gradients);
// - with the optimizer on the host, it keeps this rank's reduced part of a bucket in a buffer of
//   its own until the copy to the host, DeepSpeed in the bucket.
struct ExecutorHoldsMore {
  std::vector<Bytes> unreduced_grads;  // per op: fitting gradients produced, not yet reduced
  std::vector<Bytes> reduce_bucket;    // per op: reduced parts not yet copied to the host
};

// Bytes of the gradients among `tensors` (global ids) that fit in a reduce bucket, where the plan
// has the hook copy them into it (stages 2-3 with contiguous_gradients).
template <typename Tensors>
Bytes fitting_grads(const Plan& plan, const Tensors& tensors) {
  const ZeroConfig& zero = plan.request.config.zero;
  if (plan.schedule.context.stage < 2 || !zero.contiguous_gradients) return 0;
  Elements fitting = 0;
  for (const auto t : tensors) {
    const Elements numel = plan.schedule.layout.tensor_numel[std::size_t(t)];
    if (numel <= zero.reduce_bucket_size) fitting += numel;
  }
  return fitting * plan.request.config.precision.grad_bytes();
}

std::vector<std::int32_t> tensors_of_layer(const ParamLayout& layout, std::size_t layer) {
  std::vector<std::int32_t> tensors;
  for (auto t = layout.layer_first_tensor[layer]; t < layout.layer_first_tensor[layer + 1]; ++t) tensors.push_back(t);
  return tensors;
}

ExecutorHoldsMore executor_holds_more(const Plan& plan) {
  const Schedule& schedule = plan.schedule;
  ExecutorHoldsMore more;
  Bytes unreduced = 0;
  for (std::size_t i = 0; i < schedule.ops.size(); ++i) {
    const Op& op = schedule.ops[i];
    if (op.kind == OpKind::Backward) {
      unreduced += fitting_grads(plan, tensors_of_layer(schedule.layout, std::size_t(op.layer)));
    }
    const bool reduction = (op.kind == OpKind::ReduceScatter || op.kind == OpKind::AllReduce) && op.bucket >= 0;
    if (reduction) {
      unreduced -= fitting_grads(plan, schedule.tensors_of(schedule.buckets[std::size_t(op.bucket)]));
    }
    more.unreduced_grads.push_back(unreduced);
    // The copy to the host directly follows its reduction; its bytes are the reduced part.
    const Op* next = i + 1 < schedule.ops.size() ? &schedule.ops[i + 1] : nullptr;
    const bool copied_next = reduction && next && next->kind == OpKind::CopyD2H && next->bucket == op.bucket;
    more.reduce_bucket.push_back(copied_next ? next->bytes : 0);
  }
  return more;
}

// After every op of the second step (the first allocates what steps keep): every component outside
// the activations as the plan has it, with what the executor holds more. On rank 0, whose step the
// schedule is: in stage 1 another rank keeps other buckets' gradients.
void expect_every_op_follows_the_plan(const Gpt2Setup& setup) {
  const Plan plan = large_vocabulary_plan(setup);
  const std::vector<DeviceComponents> predicted = replay_memory_components(plan.schedule);
  const ExecutorHoldsMore more = executor_holds_more(plan);
  MemoryLedger ledger;
  Gpt2Model model(plan.request.model,
                  {.micro_batch = setup.micro_batch, .seq_len = setup.seq_len, .checkpointing = setup.checkpointing,
                   .activation_element_bytes = plan.request.config.precision.param_bytes()},
                  ledger);
  ZeroEngine engine(plan, world(), model, ledger);
  engine.step(0);
  int mismatches = 0;
  engine.step(1, [&](std::size_t i, double, double) {
    if (world().rank() != 0) return;
    DeviceComponents expected = without_activations(predicted[i + 1]);
    auto& gpu = expected[std::size_t(Device::Gpu)];
    gpu[std::size_t(Component::UnreducedGrads)] += more.unreduced_grads[i];
    gpu[std::size_t(Component::ReduceBucket)] += more.reduce_bucket[i];
    const DeviceComponents measured = measured_now(ledger);
    if (measured == expected || ++mismatches > 3) return;  // the first few tell enough
    for (std::size_t d = 0; d < measured.size(); ++d) {
      for (std::size_t c = 0; c < measured[d].size(); ++c) {
        EXPECT_EQ(measured[d][c], expected[d][c])
            << "after op " << i << " (" << plan.schedule.describe(i, plan.request.model) << "): "
            << to_string(Device(d)) << " " << to_string(Component(c));
      }
    }
  });
  EXPECT_EQ(mismatches, 0);
}

TEST(StepMemory, EveryOpFollowsThePlanInEveryStageAndPrecision) {
  for (const Precision precision : {Precision::Fp32, Precision::Bf16, Precision::Fp16}) {
    for (int stage = 0; stage <= 3; ++stage) {
      const Gpt2Setup setup{.stage = stage, .precision = precision};
      SCOPED_TRACE(name_of(setup));
      expect_every_op_follows_the_plan(setup);
    }
  }
}

TEST(StepMemory, AccumulationCheckpointingAndOffloadFollowThePlan) {
  std::vector<Gpt2Setup> variants;
  for (int stage = 2; stage <= 3; ++stage) {
    variants.push_back({.stage = stage, .grad_accumulation = 2, .precision = Precision::Bf16});
    variants.push_back({.stage = stage, .checkpointing = true, .precision = Precision::Bf16});
    variants.push_back({.stage = stage, .precision = Precision::Bf16, .offload_optimizer = true});
  }
  variants.push_back({.stage = 3, .precision = Precision::Bf16, .offload_optimizer = true, .offload_param = true});
  variants.push_back(
      {.stage = 3, .grad_accumulation = 2, .precision = Precision::Bf16, .offload_optimizer = true, .nvme = true});
  for (const Gpt2Setup& setup : variants) {
    SCOPED_TRACE(name_of(setup) + (setup.grad_accumulation > 1 ? " ga2" : ""));
    expect_every_op_follows_the_plan(setup);
  }
}

}  // namespace
}  // namespace zerolens::exec
