// Invariants of the schedule (the single source of memory peaks and traffic), over many configs.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "sim/schedule/comm.hpp"
#include "sim/schedule/memory_replay.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

Model small_transformer(bool tied = true) { return testing::small_transformer(3, 64, tied); }

struct Case {
  int stage;
  OffloadDevice optimizer, param;
  int grad_accumulation;
  bool checkpointing, cpu_checkpointing, overlap, contiguous;
  Precision precision;
  Elements reuse_distance;
  Elements bucket;
};

std::string name_of(const Case& c) {
  return "stage" + std::to_string(c.stage) + " opt:" + to_string(c.optimizer) + " param:" + to_string(c.param) +
         " gas" + std::to_string(c.grad_accumulation) + (c.checkpointing ? " ckpt" : "") +
         (c.cpu_checkpointing ? "-cpu" : "") + (c.overlap ? " overlap" : "") + (c.contiguous ? " contiguous" : "") +
         " " + to_string(c.precision) + " reuse" + std::to_string(c.reuse_distance) + " bucket" + std::to_string(c.bucket);
}

std::vector<Case> cases() {
  std::vector<Case> all;
  const auto none = OffloadDevice::None, cpu = OffloadDevice::Cpu, nvme = OffloadDevice::Nvme;
  const std::vector<std::tuple<int, OffloadDevice, OffloadDevice>> variants = {
      {0, none, none}, {1, none, none}, {2, none, none}, {3, none, none}, {1, cpu, none},
      {2, cpu, none},  {3, cpu, none},  {3, cpu, cpu},   {3, nvme, none}, {3, nvme, nvme}};
  for (const auto& [stage, optimizer, param] : variants) {
    for (const int gas : {1, 3}) {
      for (const bool ckpt : {false, true}) {
        for (const bool flags : {false, true}) {
          all.push_back({stage, optimizer, param, gas, ckpt, ckpt && flags, flags, !flags,
                         flags ? Precision::Bf16 : Precision::Fp16, flags ? 0 : Elements(1e9),
                         flags ? 30'000 : Elements(5e8)});
        }
      }
    }
  }
  return all;
}

TrainingConfig config_of(const Case& c) {
  TrainingConfig config = testing::mixed_adam(c.stage, c.precision);
  config.zero.offload_optimizer.device = c.optimizer;
  config.zero.offload_param.device = c.param;
  config.zero.offload_optimizer.nvme_path = config.zero.offload_param.nvme_path = "/nvme";
  config.batch.gradient_accumulation_steps = c.grad_accumulation;
  config.activation_checkpointing.enabled = c.checkpointing;
  config.activation_checkpointing.cpu_checkpointing = c.cpu_checkpointing;
  config.zero.overlap_comm = c.overlap;
  config.zero.contiguous_gradients = c.contiguous;
  config.zero.stage3_max_reuse_distance = c.reuse_distance;
  config.zero.stage3_param_persistence_threshold = 1000;
  config.zero.reduce_bucket_size = c.bucket;
  config.seq_len = 32;
  config.batch.micro_batch_per_gpu = 2;
  return config;
}

// Also with a frozen base: LoRA (every case) and QLoRA (4-bit weights stay on the GPU).
TEST(ScheduleInvariants, HoldForEveryStageOffloadAndOption) {
  const Model full = small_transformer();
  TransformerShape lora_shape = *full.shape;
  lora_shape.lora.rank = 4;
  const Model lora = build_transformer("small-lora", lora_shape);
  lora_shape.lora.base_format = WeightFormat::Nf4DoubleQuant;
  const Model qlora = build_transformer("small-qlora", lora_shape);
  // An encoder-decoder (T5's layers: two stacks, a shared embedding used three times).
  TransformerShape t5_shape = *full.shape;
  t5_shape.family = "t5";
  t5_shape.architecture = Architecture::EncoderDecoder;
  t5_shape.layers = 2;
  t5_shape.decoder_layers = 2;
  t5_shape.relative_attention_buckets = 32;
  t5_shape.norm = NormKind::RmsNorm;
  t5_shape.qkv_bias = t5_shape.out_proj_bias = t5_shape.mlp_bias = false;
  t5_shape.learned_positions = false;
  t5_shape.loss_in_fp32 = false;
  const Model t5 = build_transformer("small-t5", t5_shape);
  for (const auto& [c, model] : [&] {
         std::vector<std::pair<Case, const Model*>> all;
         for (const auto& c : cases()) {
           all.push_back({c, &full});
           all.push_back({c, &lora});
           all.push_back({c, &t5});
           if (c.param == OffloadDevice::None) all.push_back({c, &qlora});
         }
         return all;
       }()) {
    SCOPED_TRACE(name_of(c) + " " + model->name);
    const Plan plan = testing::plan_of(*model, config_of(c), 4);
    const Schedule& schedule = plan.schedule;
    const MemoryTimeline memory = replay_memory(schedule, true);
    ASSERT_FALSE(schedule.ops.empty());

    // Everything allocated during the step is freed by its end: memory returns to the resident level.
    for (int d = 0; d < kDeviceCount; ++d) {
      EXPECT_EQ(memory.after_op.back()[std::size_t(d)], memory.devices[std::size_t(d)].resident) << to_string(Device(d));
    }

    // The plan's peak is the schedule's highest running total (plus the fragmentation allowance).
    Bytes highest = memory.devices[0].resident;
    for (const auto& high : memory.high_during_op) highest = std::max(highest, high[0]);
    const auto& gpu = plan.device(Device::Gpu);
    EXPECT_EQ(gpu.peak, highest + gpu.components[std::size_t(Component::Fragmentation)]);

    // Every stage-3 gather is released.
    std::map<int, int> gathers, releases;
    for (const auto& op : schedule.ops) {
      if (op.kind == OpKind::AllGather && op.layer >= 0) gathers[op.layer]++;
      if (op.kind == OpKind::Release) releases[op.layer]++;
    }
    EXPECT_EQ(gathers, releases);
    EXPECT_EQ(c.stage == 3, !gathers.empty());

    // Every gradient is reduced exactly once per reduction: once per step (stages 0-1) or once per
    // micro-step (stages 2-3).
    std::map<int, int> reductions;
    for (const auto& bucket : schedule.buckets) {
      for (const auto tensor : schedule.tensors_of(bucket)) reductions[tensor]++;
    }
    const int expected = c.stage >= 2 ? c.grad_accumulation : 1;
    const auto& trainable = schedule.layout.tensor_trainable;
    ASSERT_EQ(reductions.size(), std::size_t(std::count(trainable.begin(), trainable.end(), true)));
    for (const auto& [tensor, count] : reductions) {
      EXPECT_EQ(count, expected) << "tensor " << tensor;
      EXPECT_TRUE(trainable[std::size_t(tensor)]) << "tensor " << tensor;
    }

    // Dependencies point backwards (program order is a valid topological order).
    for (std::size_t i = 0; i < schedule.ops.size(); ++i) {
      for (const auto dep : schedule.deps_of(schedule.ops[i])) EXPECT_LT(dep, i);
    }

    // The communication totals are the sums of the schedule's collectives.
    std::array<Bytes, kOpKindCount> bytes{};
    for (const auto& op : schedule.ops) {
      if (op.link == Link::Network) bytes[std::size_t(op.kind)] += op.bytes;
    }
    for (int k = 0; k < kOpKindCount; ++k) EXPECT_EQ(plan.comm.collectives[std::size_t(k)].bytes, bytes[std::size_t(k)]);
  }
}

TEST(ScheduleStage3, ReuseDistanceZeroRegathersEveryUse) {
  // Untied model: every layer is used once in forward and once in backward.
  const Model model = testing::flat_model(4, 1000);
  TrainingConfig config = testing::mixed_adam(3);
  config.zero.stage3_max_reuse_distance = 0;
  config.zero.stage3_prefetch_bucket_size = 0;
  config.zero.stage3_param_persistence_threshold = 0;
  const Plan plan = testing::plan_of(model, config, 4);
  EXPECT_EQ(plan.comm.of(OpKind::AllGather).calls, 8);
  EXPECT_EQ(plan.comm.of(OpKind::AllGather).bytes, 2 * 4000 * 2);
}

TEST(ScheduleStage3, DefaultReuseDistanceKeepsParametersForBackward) {
  // DeepSpeed does not release a parameter reused within stage3_max_reuse_distance (1e9) elements,
  // so a small model gathers each layer once in forward and keeps it for backward.
  const Model model = testing::flat_model(4, 1000);
  TrainingConfig config = testing::mixed_adam(3);
  config.zero.stage3_param_persistence_threshold = 0;
  config.zero.stage3_prefetch_bucket_size = 0;
  const Plan plan = testing::plan_of(model, config, 4);
  EXPECT_EQ(plan.comm.of(OpKind::AllGather).calls, 4);
}

TEST(ScheduleStage3, PrefetchGathersUpcomingLayersBeforeTheirForward) {
  const Model model = testing::flat_model(4, 1000);
  TrainingConfig config = testing::mixed_adam(3);
  config.zero.stage3_param_persistence_threshold = 0;
  config.zero.stage3_max_reuse_distance = 0;
  config.zero.stage3_prefetch_bucket_size = 2500;  // up to three 1000-element layers ahead
  const Plan plan = testing::plan_of(model, config, 4);
  // Ops before the first forward: layer 0's gather plus prefetches of layers 1, 2 and 3 (the
  // prefetch stops once 2500 elements or more are in flight).
  std::vector<int> gathered_before_first_forward;
  for (const auto& op : plan.schedule.ops) {
    if (op.kind == OpKind::Forward) break;
    if (op.kind == OpKind::AllGather) gathered_before_first_forward.push_back(op.layer);
  }
  EXPECT_EQ(gathered_before_first_forward, (std::vector<int>{0, 1, 2, 3}));
}

// Persistent parameters are never gathered for forward or backward; DeepSpeed all-gathers them once
// after the optimizer step (stage3.py _post_step), 4 tensors x 4 ranks x 250 elements x 2 bytes, in
// one all_gather_into_tensor call per parameter (partition_parameters.py
// _allgather_params_coalesced): 4 calls.
TEST(ScheduleStage3, PersistentParametersAreGatheredOnlyAfterTheStep) {
  const Model model = testing::flat_model(4, 1000);
  TrainingConfig config = testing::mixed_adam(3);
  config.zero.stage3_param_persistence_threshold = 1000;  // <= threshold persists (DeepSpeed)
  const Plan plan = testing::plan_of(model, config, 4);
  EXPECT_EQ(plan.comm.of(OpKind::AllGather).calls, 4);
  EXPECT_EQ(plan.comm.of(OpKind::AllGather).bytes, 4 * 4 * 250 * 2);
  for (const auto& op : plan.schedule.ops) {
    if (op.kind == OpKind::AllGather) {
      EXPECT_EQ(op.phase, Phase::Optimizer);
    }
  }
  EXPECT_EQ(plan.device(Device::Gpu).components[std::size_t(Component::ParamsPersistent)], 4 * 1000 * 2);
}

// A parameter swap is a request per tensor partition (DeepSpeed's AsyncPartitionedParameterSwapper,
// the executor's NvmeSwapper): a layer's read issues one per partitioned tensor of the layer (a
// persistent one is whole on the device); a sub-group swap of optimizer states is one. The updated
// partitions are written after the update of the sub-group that completes them, before its states
// (stage3.py _reassign_or_swap_out_partitioned_parameters, then _release_sub_group). Worked by
// hand: owned partitions in order w0 500, w1 500, b 5, v 500, w2 500 (2005 elements) in sub-groups
// of 1000: w0 and w1 end in sub-group 0 (2 requests, 1000 x 2 bytes), b and v in 1 (2, 505 x 2),
// w2 in 2 (1, 500 x 2). With the optimizer in host memory, one write-back of all 5 after the
// update. Collectives carry their wire element: the training dtype's 2 bytes for 16-bit parameters
// and gradients, 4 with fp32 gradient accumulation for the reductions.
TEST(ScheduleStage3, NvmeRequestsAndWireElementsFollowWhatIsMoved) {
  Model model = testing::flat_model(3, 1000);
  model.layers[1].params.push_back({"b", {10}});  // persistent: at most the threshold
  model.layers[1].params.push_back({"v", {1000}});
  TrainingConfig config = testing::mixed_adam(3, Precision::Bf16);
  config.zero.stage3_param_persistence_threshold = 10;
  config.zero.offload_optimizer.device = OffloadDevice::Nvme;
  config.zero.offload_param.device = OffloadDevice::Nvme;
  config.zero.offload_optimizer.nvme_path = config.zero.offload_param.nvme_path = "/nvme";
  config.zero.sub_group_size = 1000;
  const Plan plan = testing::plan_of(model, config, 2);
  std::vector<int> layer_reads;
  std::vector<std::string> optimizer_sequence;  // the optimizer phase's NVMe ops and updates
  std::vector<Bytes> param_write_bytes;
  int sub_group_ops = 0;
  for (const Op& op : plan.schedule.ops) {
    if (op.kind == OpKind::NvmeRead && op.swapped == Swapped::Parameters &&
        op.phase == Phase::Forward)
      layer_reads.push_back(op.io_requests);
    const bool nvme = op.kind == OpKind::NvmeRead || op.kind == OpKind::NvmeWrite;
    if (nvme && op.swapped == Swapped::OptimizerStates) {
      ++sub_group_ops;
      EXPECT_EQ(op.io_requests, 1);
    }
    if (op.phase == Phase::Optimizer && (nvme || op.kind == OpKind::OptimizerStep)) {
      const bool params = op.swapped == Swapped::Parameters;
      optimizer_sequence.push_back(std::string(to_string(op.kind)) + (params ? " params " : " ") +
                                   std::to_string(op.sub_group) +
                                   (params ? " x" + std::to_string(op.io_requests) : ""));
      if (params) param_write_bytes.push_back(op.bytes);
    }
    const bool scalar = op.kind == OpKind::GradNorm || op.kind == OpKind::OverflowCheck;
    const int wire = is_collective(op.kind) && !scalar ? 2 : 0;
    EXPECT_EQ(op.wire_element_bytes, wire) << to_string(op.kind);
  }
  EXPECT_EQ(layer_reads, (std::vector<int>{1, 2, 1}));
  EXPECT_EQ(sub_group_ops, 2 * 3);  // 2005 owned elements (500 + 5 + 3 x 500) in 3 sub-groups
  EXPECT_EQ(optimizer_sequence,
            (std::vector<std::string>{
                "nvme_read 0", "optimizer_step 0", "nvme_write params 0 x2", "nvme_write 0",
                "nvme_read 1", "optimizer_step 1", "nvme_write params 1 x2", "nvme_write 1",
                "nvme_read 2", "optimizer_step 2", "nvme_write params 2 x1", "nvme_write 2"}));
  EXPECT_EQ(param_write_bytes, (std::vector<Bytes>{2000, 1010, 1000}));
  TrainingConfig host_optimizer = config;
  host_optimizer.zero.offload_optimizer.device = OffloadDevice::Cpu;
  std::vector<int> write_backs;
  for (const Op& op : testing::plan_of(model, host_optimizer, 2).schedule.ops) {
    if (op.kind == OpKind::NvmeWrite) write_backs.push_back(op.io_requests);
  }
  EXPECT_EQ(write_backs, (std::vector<int>{5}));  // every tensor, the persistent one too
  config.precision.fp32_grad_accumulation = true;
  for (const Op& op : testing::plan_of(model, config, 2).schedule.ops) {
    if (op.kind == OpKind::ReduceScatter || op.kind == OpKind::AllGather) {
      EXPECT_EQ(op.wire_element_bytes, op.kind == OpKind::ReduceScatter ? 4 : 2);
    }
  }
}

// A two-layer model whose activation terms are set by hand, so the running memory can be worked
// out on paper: micro-batch 2 x sequence 4 = 8 tokens, fp16 (2-byte activations).
Model hand_model() {
  Model model;
  model.name = "hand";
  for (int i = 0; i < 2; ++i) {
    Layer layer;
    layer.name = i == 0 ? "A" : "B";
    layer.kind = LayerKind::TransformerBlock;
    layer.params.push_back({"w", {1}});
    layer.activations.elements = i == 0 ? 10 : 20;
    layer.activations.checkpoint_elements = 3;
    if (i == 1) {
      layer.activations.forward_working_fixed_bytes = 100;
      layer.activations.backward_working_elements = 25;
    }
    model.layers.push_back(layer);
  }
  return model;
}

Plan hand_plan(bool checkpointing) {
  TrainingConfig config = testing::mixed_adam(0);
  config.batch.micro_batch_per_gpu = 2;
  config.seq_len = 4;
  config.activation_checkpointing.enabled = checkpointing;
  PlanRequest request;
  request.model = hand_model();
  request.config = config;
  request.dp_size = 1;
  request.cluster = testing::test_cluster(1);
  request.options.cuda_context_bytes = 0;
  request.options.library_workspace_bytes = 0;
  request.options.allocator = AllocatorSpec{.kind = AllocatorKind::Flat};
  return make_plan(request);
}

TEST(ScheduleMemory, ActivationPeakWorkedByHand) {
  // Resident: 2 params x (2 fp16 + 4 master + 8 Adam) = 28 bytes. Stored: A 8*10*2 = 160,
  // B 8*20*2 = 320. B's forward adds a 100-byte-per-token working set (800 bytes) on top of all
  // stored activations: 28 + 160 + 320 + 800 = 1308. Backward of B: 28 + 480 + 2 (grad) + 400
  // (25 elements x 8 tokens x 2 bytes) = 910 < 1308.
  const Plan plan = hand_plan(false);
  EXPECT_EQ(plan.device(Device::Gpu).peak, 1308);
  EXPECT_EQ(plan.device(Device::Gpu).categories[std::size_t(Category::Activations)], 1280);
  EXPECT_EQ(plan.schedule.ops[std::size_t(plan.device(Device::Gpu).peak_op)].kind, OpKind::Forward);
}

TEST(ScheduleMemory, CheckpointedActivationPeakWorkedByHand) {
  // Checkpoints keep 3 elements per token: 48 bytes per layer. Forward of B: 28 + 48 (A's
  // checkpoint) + 48 (B's) + 800 working = 924; during B's own forward its full 320 bytes exist
  // briefly: 28 + 48 + 320 = 396. Backward of B: recompute 320 on top of 96 -> 28 + 96 + 320 + 2 +
  // 400 = 846. The peak is 924.
  const Plan plan = hand_plan(true);
  EXPECT_EQ(plan.device(Device::Gpu).peak, 924);
}

// DeepSpeed's gradient hook (contiguous_gradients) copies a gradient that fits in a reduce bucket
// into the bucket and frees it; one larger than a bucket stays where autograd put it until its
// bucket is reduced. A 1000-element tensor and a 100-element one, buckets of 500 elements, fp16
// gradients: after its backward the large gradient (2000 bytes) is still held, the small one is not.
TEST(ScheduleMemory, GradientLargerThanABucketLivesUntilItsReduction) {
  Model model = testing::flat_model(2, 100);
  model.layers[0].params[0].shape = {1000};
  for (const int stage : {2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    TrainingConfig config = testing::mixed_adam(stage);
    config.zero.reduce_bucket_size = 500;
    const Plan plan = testing::plan_of(model, config, 2);
    const auto memory = replay_memory_components(plan.schedule);
    const auto unreduced_after = [&](std::size_t op) {
      return memory[op + 1][std::size_t(Device::Gpu)][std::size_t(Component::UnreducedGrads)];
    };
    const auto& ops = plan.schedule.ops;
    const auto backward_of = [&](int layer) {
      return std::size_t(std::find_if(ops.begin(), ops.end(), [&](const Op& op) {
                           return op.kind == OpKind::Backward && op.layer == layer;
                         }) - ops.begin());
    };
    const auto reduces_large = [&](const Op& op) {
      if (op.kind != OpKind::ReduceScatter) return false;
      const auto tensors = plan.schedule.tensors_of(plan.schedule.buckets[std::size_t(op.bucket)]);
      return std::find(tensors.begin(), tensors.end(), 0) != tensors.end();
    };
    EXPECT_EQ(unreduced_after(backward_of(1)), 0);
    const std::size_t large = backward_of(0);
    const auto reduction =
        std::size_t(std::find_if(ops.begin() + std::ptrdiff_t(large), ops.end(), reduces_large) - ops.begin());
    ASSERT_LT(reduction, ops.size());
    for (std::size_t op = large; op < reduction; ++op) EXPECT_EQ(unreduced_after(op), 2000) << "op " << op;
    EXPECT_EQ(unreduced_after(reduction), 0);
  }
}

// DeepSpeed 0.19.8 allocates the stage-1/2 reduce buffers at the step's first gradient hook
// (process_gradients -> setup_buckets): after the first backward that completes a gradient, once
// its activations are freed. A tied LM head completes none (the embedding's gradient is whole only
// after the embedding's backward), so ln_f's backward carries them; an untied head's own. Older
// DeepSpeed allocated them as backward() began: the first effect of the first backward.
TEST(ScheduleMemory, ReduceBuffersComeAtTheFirstGradientHook) {
  for (const bool tied : {true, false}) {
    for (const bool first_hook : {true, false}) {
      SCOPED_TRACE(std::string(tied ? "tied" : "untied") +
                   (first_hook ? ", first hook" : ", backward()"));
      const Model model = small_transformer(tied);
      TrainingConfig config = testing::mixed_adam(2);
      config.zero.reduce_bucket_size = 5000;
      config.zero.reduce_buffers_at_first_hook = first_hook;
      const Plan plan = testing::plan_of(model, config, 2);
      const Bytes ipg = 5000 * 2;  // one bf16 buffer (overlap_comm is off for stage 2)
      std::vector<std::pair<const Op*, std::size_t>> allocations;  // op, position among its effects
      for (const Op& op : plan.schedule.ops) {
        const auto effects = plan.schedule.effects_of(op);
        for (std::size_t i = 0; i < effects.size(); ++i) {
          if (effects[i].component == Component::ReduceBucket && effects[i].bytes == ipg)
            allocations.push_back({&op, i});
        }
      }
      ASSERT_EQ(allocations.size(), 1u);
      const auto [op, position] = allocations.front();
      const int head = int(model.layers.size()) - 1;
      ASSERT_EQ(op->kind, OpKind::Backward);
      if (!first_hook) {
        EXPECT_EQ(op->layer, head);
        EXPECT_EQ(position, 0u);
        continue;
      }
      EXPECT_EQ(op->layer, tied ? head - 1 : head);
      const auto effects = plan.schedule.effects_of(*op);
      const auto stored_freed =
          std::find_if(effects.begin(), effects.end(), [](const MemEffect& e) {
            return e.component == Component::ActivationsStored && e.bytes < 0;
          });
      ASSERT_NE(stored_freed, effects.end());
      EXPECT_GT(std::ptrdiff_t(position), stored_freed - effects.begin());
    }
  }
}

// The temporaries torch.optim's Adam builds during step(), worked by hand for a 1000-element and
// a 100-element tensor on 2 ranks (550 elements owned each):
// - DeepSpeed steps one flat fp32 tensor: foreach sqrt(v) of its elements, 4 B each (550 x 4);
//   for-loop sqrt(v) and its quotient at once (2 x 550 x 4); stage 3 one sub-group (here 200);
// - FSDP steps every shard in one call: foreach 550 x 4; for-loop two copies of the largest
//   shard (1000 / 2 = 500 elements);
// - fused Adam (DeepSpeed's default) and SGD build none.
TEST(ScheduleMemory, OptimizerTemporariesFollowTheKernel) {
  Model model = testing::flat_model(2, 100);
  model.layers[0].params[0].shape = {1000};
  const auto temporaries_of = [&](TrainingConfig config) {
    const Plan plan = testing::plan_of(model, config, 2);
    Bytes peak = 0, total = 0;
    for (const Op& op : plan.schedule.ops) {
      for (const auto& effect : plan.schedule.effects_of(op)) {
        if (effect.component != Component::OptimizerTemporaries) continue;
        EXPECT_EQ(op.kind, OpKind::OptimizerStep);
        total += effect.bytes;
        peak = std::max(peak, total);
      }
    }
    EXPECT_EQ(total, 0) << "freed when step() returns";
    return peak;
  };
  const auto with = [](TrainingConfig config, std::optional<OptimizerKernel> kernel) {
    config.optimizer.kernel = kernel;
    return config;
  };
  const TrainingConfig stage2 = testing::mixed_adam(2);
  EXPECT_EQ(temporaries_of(stage2), 0);
  EXPECT_EQ(temporaries_of(with(stage2, OptimizerKernel::Foreach)), 550 * 4);
  EXPECT_EQ(temporaries_of(with(stage2, OptimizerKernel::ForLoop)), 2 * 550 * 4);
  TrainingConfig stage3 = testing::mixed_adam(3);
  stage3.zero.sub_group_size = 200;
  EXPECT_EQ(temporaries_of(with(stage3, OptimizerKernel::Foreach)), 200 * 4);
  TrainingConfig fsdp = testing::mixed_adam(3, Precision::Bf16);
  fsdp.framework = Framework::Fsdp2;
  fsdp.zero.sub_group_size = 200;  // not FSDP's: it steps every shard at once
  EXPECT_EQ(temporaries_of(fsdp), 550 * 4) << "FSDP runs torch.optim, foreach by default";
  EXPECT_EQ(temporaries_of(with(fsdp, OptimizerKernel::ForLoop)), 2 * 500 * 4);
  EXPECT_EQ(temporaries_of(with(fsdp, OptimizerKernel::Fused)), 0);
  TrainingConfig sgd = with(stage2, OptimizerKernel::Foreach);
  sgd.optimizer.type = OptimizerType::Sgd;
  EXPECT_EQ(temporaries_of(sgd), 0);
}

// DeepSpeed's sub_group_size 0 (which BELLE's ZeRO-3 config used) makes every parameter a
// sub-group of its own (stage3.py _create_fp16_sub_groups): the optimizer converts at most the
// largest parameter's partition at once. 1000- and 100-element tensors on 2 ranks: 500 elements,
// a bf16 flattened copy (2 B) beside its fp32 cast (4 B).
TEST(ScheduleMemory, SubGroupSizeZeroIsOneParameterPerSubGroup) {
  Model model = testing::flat_model(2, 100);
  model.layers[0].params[0].shape = {1000};
  TrainingConfig config = testing::mixed_adam(3, Precision::Bf16);
  config.zero.sub_group_size = 0;
  EXPECT_NO_THROW(config.validate());
  const Plan plan = testing::plan_of(model, config, 2);
  EXPECT_EQ(plan.schedule.layout.sub_group_elements(0), 500);
  Bytes held = 0, peak = 0;
  for (const Op& op : plan.schedule.ops) {
    for (const auto& effect : plan.schedule.effects_of(op)) {
      if (effect.component != Component::Fp32GradCast) continue;
      held += effect.bytes;
      peak = std::max(peak, held);
    }
  }
  EXPECT_EQ(peak, 500 * (2 + 4));
  config.zero.sub_group_size = -1;
  EXPECT_THROW(config.validate(), InputError);
}

}  // namespace
}  // namespace zerolens
