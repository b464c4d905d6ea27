#include "exec/engine/zero_engine.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "exec/engine/zero_state.hpp"
#include "sim/core/error.hpp"

namespace zerolens::exec {
namespace {

using Clock = std::chrono::steady_clock;

void require_offload_supported(const TrainingConfig& config) {
  const ZeroConfig& zero = config.zero;
  const OffloadDevice optimizer = zero.offload_optimizer.device, params = zero.offload_param.device;
  if (!config.precision.mixed() && params != OffloadDevice::None &&
      (optimizer == OffloadDevice::Nvme || params == OffloadDevice::Nvme)) {
    throw InputError("zero_optimization.offload_param.device",
                     "fp32 training with the parameters offloaded and NVMe in use is not run: the "
                     "host optimizer "
                     "updates the fp32 parameters themselves, which the executor keeps in memory "
                     "only (use bf16 or "
                     "fp16, or keep the parameters on the device)");
  }
  if (params != OffloadDevice::None && optimizer == OffloadDevice::None) {
    throw InputError("zero_optimization.offload_param.device",
                     "parameter offload needs offload_optimizer.device = cpu or nvme in the CPU "
                     "executor (the plan "
                     "has no copy of the updated parameters back to the host)");
  }
}

// A MoE model's layers exchange tokens over the EP group (the schedule's all-to-alls there); a
// schedule whose expert tensors are no MoE layer's (tests flag ordinary tensors) has none.
bool exchanges_tokens(const Schedule& schedule) {
  return std::any_of(schedule.ops.begin(), schedule.ops.end(), [](const Op& op) {
    return op.kind == OpKind::AllToAll && op.group == ProcessGroup::Expert;
  });
}

// The groups ProcessGroups split for the plan's shard and hpZ groups.
void require_data_subgroups(const Plan& plan, const ProcessGroups& groups) {
  require_runnable_sharding(plan);
  const ScheduleContext& c = plan.schedule.context;
  const bool hybrid = c.replicas() > 1, hpz = c.hpz_group > 0;
  if (hybrid != (groups.replicate() != nullptr) || hpz != (groups.secondary() != nullptr) ||
      groups.shard().size() != c.shard_size()) {
    throw std::logic_error("the process groups were not split for the plan's shard and hpZ groups");
  }
}

void require_parallelism(const Plan& plan) {
  const TrainingConfig& config = plan.request.config;
  if (config.tensor_parallel.active() && config.activation_checkpointing.partition_activations) {
    throw InputError("activation_checkpointing.partition_activations",
                     "not run by the CPU executor yet (planned: docs/parallelism.md)");
  }
}

void require_groups(const Plan& plan, const ProcessGroups& groups) {
  const ParallelShape planned = plan.schedule.context.parallel_shape();
  const ParallelShape& running = groups.shape();
  if (planned.data != running.data || planned.tensor != running.tensor ||
      planned.pipeline != running.pipeline) {
    const int world = planned.world();
    throw InputError("--gpus", "the plan is for " + std::to_string(world) + " ranks (" +
                                   std::to_string(planned.data) + " data-parallel x " +
                                   std::to_string(planned.tensor) + " tensor-parallel x " +
                                   std::to_string(planned.pipeline) + " pipeline) but " +
                                   std::to_string(groups.world().size()) +
                                   " processes are running (start with mpirun -np " +
                                   std::to_string(world) + ")");
  }
  require_data_subgroups(plan, groups);
}

// ZeRO++'s quantized collectives quantize in host memory (kernels/quantize.hpp) over MPI.
void require_host_quantization(const Plan& plan, const ProcessGroups& groups) {
  const ScheduleContext& c = plan.schedule.context;
  if (!c.quantized_weights && !c.quantized_gradients) return;
  if (groups.data().memory_space() != nullptr) {
    throw InputError(c.quantized_weights ? "--quantized-weights" : "--quantized-gradients",
                     "ZeRO++'s quantized collectives run on --device cpu (the GPU kernels, "
                     "kernels/cuda/quantize.hpp, are not wired into the CUDA engine yet)");
  }
}

// The ZeRO++ combinations the executor runs: qwZ and qgZ over data parallelism alone, without hpZ
// or hybrid sharding (each of those runs alone).
void require_zeropp_supported(const Plan& plan) {
  const ScheduleContext& c = plan.schedule.context;
  if (!c.quantized_weights && !c.quantized_gradients) return;
  const char* flag = c.quantized_weights ? "--quantized-weights" : "--quantized-gradients";
  if (c.hpz_group > 0 || c.replicas() > 1) {
    throw InputError(flag,
                     std::string("ZeRO++'s quantized collectives together with ") +
                         (c.hpz_group > 0 ? "hpZ (--hpz)" : "hybrid sharding (--shard-group)") +
                         " are planned, not yet run; run either alone");
  }
  const TrainingConfig& config = plan.request.config;
  if (config.tensor_parallel.active() || config.pipeline.active()) {
    throw InputError(flag,
                     "ZeRO++'s quantized collectives with tensor or pipeline parallelism are "
                     "planned, not yet run by the executor (it runs them over data parallelism "
                     "alone)");
  }
}

// Expert parallelism as the engine runs it (docs/executor.md): ZeRO stages 0-3 over data
// parallelism alone, each expert tensor over its expert-data-parallel group. What it does not run
// is refused by name.
void require_expert_parallel_supported(const Plan& plan) {
  const ScheduleContext& c = plan.schedule.context;
  if (c.expert_parallel <= 1) return;
  const TrainingConfig& config = plan.request.config;
  const auto refuse = [](const std::string& what) {
    throw InputError("--ep", "expert parallelism with " + what +
                                 " is planned, not run by the executor (it runs ZeRO 0-3 over "
                                 "data parallelism alone with expert groups)");
  };
  if (config.tensor_parallel.active() || config.pipeline.active())
    refuse("tensor or pipeline parallelism");
  if (c.replicas() > 1 || c.hpz_group > 0) refuse("hybrid sharding or hpZ");
  if (c.quantized_weights || c.quantized_gradients) refuse("ZeRO++'s quantized collectives");
  if (c.colossalai) refuse("ColossalAI's sharded model");
  if (c.delayed_update) refuse("the delayed parameter update");
  if (plan.schedule.layout.expert_dp_size > 0 && !c.zero_stage().partitions_optimizer_states()) {
    // Stage 0's schedule checks overflow and takes the norm without a collective, over gradients
    // identical on every rank; an expert's differ between expert-parallel ranks, so clipping or
    // skipping would split the replicas of the other parameters.
    if (config.precision.precision == Precision::Fp16)
      throw InputError("--precision",
                       "fp16 with expert parallelism at ZeRO stage 0 is not run: the stage-0 "
                       "schedule has no overflow all-reduce across the expert-parallel ranks "
                       "(use bf16 or stage 1-2)");
    if (config.gradient_clipping > 0)
      throw InputError("gradient_clipping",
                       "gradient clipping with expert parallelism at ZeRO stage 0 is not run: "
                       "the stage-0 schedule has no norm all-reduce across the expert-parallel "
                       "ranks (use stage 1-2, whose GradNorm ops combine them)");
  }
}

}  // namespace

void check_engine_supports(const Plan& plan) {
  const TrainingConfig& config = plan.request.config;
  require_parallelism(plan);
  require_zeropp_supported(plan);
  require_expert_parallel_supported(plan);
  const LossScaleConfig& scaling = config.precision.loss_scale;
  if (config.precision.precision == Precision::Fp16 && scaling.static_loss_scale < 0) {
    throw InputError("fp16.loss_scale", "must be 0 (dynamic) or a positive static scale");
  }
  if (config.precision.precision == Precision::Fp16 && scaling.dynamic() &&
      !(scaling.min_loss_scale > 0)) {
    throw InputError("fp16.min_loss_scale", "must be positive");
  }
  require_offload_supported(config);
  if (config.activation_checkpointing.cpu_checkpointing) {
    throw InputError("activation_checkpointing.cpu_checkpointing",
                     "not run by the CPU executor yet");
  }
}

// A host optimizer's gradient partition would take the replicas' sum before the last micro-step's
// own, and the replicas would share NVMe files; hpZ and hybrid sharding with TP or PP are not
// planned together (ZeRO++) or not run yet.
void require_runnable_sharding(const Plan& plan) {
  const ScheduleContext& c = plan.schedule.context;
  const bool hybrid = c.replicas() > 1, hpz = c.hpz_group > 0;
  if (!hybrid && !hpz) return;
  const char* flag = hybrid ? "--shard-group" : "--hpz";
  const TrainingConfig& config = plan.request.config;
  if (hybrid && (config.zero.offload_optimizer.device != OffloadDevice::None ||
                 config.zero.offload_param.device != OffloadDevice::None)) {
    throw InputError(flag,
                     "hybrid sharding with offload is not run by the executor (it runs it with "
                     "the optimizer and parameters on the device; plan it with `zerolens plan`)");
  }
  if (config.tensor_parallel.active() || config.pipeline.active()) {
    throw InputError(flag, std::string(hybrid ? "hybrid sharding" : "hpZ") +
                               " with tensor or pipeline parallelism is not run by the executor "
                               "(it runs over data parallelism alone)");
  }
}

ZeroEngine::ZeroEngine(const Plan& plan, Communicator& comm, LayerModel& model,
                       MemoryLedger& ledger, const EngineOptions& options)
    : ZeroEngine(plan,
                 std::make_shared<const ProcessGroups>(
                     comm, ParallelShape{.tensor = 1, .data = comm.size(), .pipeline = 1},
                     plan.schedule.context.shard_group, plan.schedule.context.hpz_group,
                     plan.schedule.context.expert_parallel),
                 model, ledger, options) {}

ZeroEngine::ZeroEngine(const Plan& plan, std::shared_ptr<const ProcessGroups> groups,
                       LayerModel& model, MemoryLedger& ledger, const EngineOptions& options) {
  require_groups(plan, *groups);
  check_engine_supports(plan);
  require_host_quantization(plan, *groups);
  state_ = std::make_unique<State>(plan, std::move(groups), model, ledger, options);
}

ZeroEngine::~ZeroEngine() = default;

StepReport ZeroEngine::step(std::int64_t step_index, const OpCallback& on_op) {
  State& s = *state_;
  s.begin_step(step_index);
  const auto start = Clock::now();
  const auto seconds = [&start] {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  s.tensor_parallel.begin_step(start);
  const std::vector<Op>& ops = s.context.schedule.ops;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    // A TP op ran inside its layer's compute op (TensorParallelOps), which timed it.
    if (s.tensor_parallel.ran(i)) {
      if (on_op) on_op(i, s.tensor_parallel.start(i), s.tensor_parallel.end(i));
      continue;
    }
    const double begin = seconds();
    s.run(ops[i], i);
    if (on_op) on_op(i, begin, seconds());
  }
  return s.finish_step();
}

std::vector<float> ZeroEngine::full_parameters() {
  return state_->params.full_parameters();
}

LinkBytes ZeroEngine::link_bytes() const {
  return state_->context.copied;
}

const Communicator* ZeroEngine::node_group() const {
  return state_->grads.node_group();
}

const Communicator* ZeroEngine::cross_node_group() const {
  return state_->grads.cross_node_group();
}

double ZeroEngine::loss_scale() const {
  return state_->optimizer.scaler().scale();
}

CheckpointMeta ZeroEngine::checkpoint_meta() const {
  return state_->checkpoint.meta();
}

RankShard ZeroEngine::checkpoint_shard() const {
  return state_->checkpoint.shard();
}

void ZeroEngine::restore(const FullState& state) {
  state_->checkpoint.restore(state);
}

ZeroEngine::State::State(const Plan& plan, std::shared_ptr<const ProcessGroups> groups,
                         LayerModel& net_, MemoryLedger& ledger, const EngineOptions& options_)
    : EngineComponents(plan, std::move(groups), net_, ledger),
      net(net_),
      options(options_),
      tensor_parallel(context),
      pipeline(context, net_),
      delayed_(plan.schedule.context.delayed_update) {
  if (context.groups->tensor() != nullptr) net.connect_tensor_parallel(tensor_parallel);
  if (context.groups->expert() != nullptr && exchanges_tokens(context.schedule))
    net.connect_expert_parallel(*context.groups->expert());
}

void ZeroEngine::State::begin_step(std::int64_t step_index) {
  step_index_ = step_index;
  loaded_.clear();
  loss_sum_ = 0;
  losses_ = 0;
  optimizer.begin_step();
  params.begin_step();
}

// The reduce buffer comes and goes in the order of the schedule's effects: a backward allocates it
// after its work (DeepSpeed's first gradient hook) unless it is the op's first effect (as
// backward() begins), any other op before its work; it goes after.
void ZeroEngine::State::run(const Op& op, std::size_t index) {
  const bool allocates_after = op.kind == OpKind::Backward && !grads.reduce_buffer_comes_first(op);
  if (!allocates_after) grads.follow_reduce_buffer(op, /*allocations=*/true);
  const bool compute =
      op.kind == OpKind::Forward || op.kind == OpKind::Backward || op.kind == OpKind::Recompute;
  if (compute) {
    net.select_micro_batch(op.micro_step);
    tensor_parallel.begin_layer(index);
  }
  run_op(op);
  // hpZ: the secondary partitions go where the schedule frees them (the update's _post_step).
  if (op.kind != OpKind::Release && changes_secondary(op) < 0) params.drop_secondary();
  if (compute) tensor_parallel.end_layer();
  if (allocates_after) grads.follow_reduce_buffer(op, /*allocations=*/true);
  grads.follow_reduce_buffer(op, /*allocations=*/false);
}

void ZeroEngine::State::run_op(const Op& op) {
  switch (op.kind) {
    case OpKind::Forward:
      return forward(op);
    case OpKind::Recompute:
      return net.recompute(std::size_t(op.layer),
                           params.layer_params(context.owner_of(std::size_t(op.layer))).views);
    case OpKind::Backward:
      return backward(op);
    case OpKind::AllGather:
      if (op.group != ProcessGroup::Secondary) require_data_group(op);
      return gather_parameters(op);
    case OpKind::Release:  // (layer -1: ColossalAI's reduce bucket, which the reducer stages)
      if (op.layer < 0) return;
      return params.release_layer(std::size_t(op.layer), changes_secondary(op) > 0
                                                             ? SecondaryCopy::Keep
                                                             : SecondaryCopy::None);
    case OpKind::ReduceScatter:
    case OpKind::AllReduce:
      if (op.group == ProcessGroup::Tensor && op.layer < 0)
        return grads.all_reduce_sequence_parallel(op);
      if (op.group == ProcessGroup::Pipeline) return grads.all_reduce_tied_embedding(op);
      if (op.group == ProcessGroup::Replicate) return grads.all_reduce_replicas(op);
      require_data_group(op);
      return grads.reduce_bucket(op);
    case OpKind::AllToAll:  // ZeRO++ qgZ's hops
      // A MoE layer's dispatch and combine ran inside its compute op (the model's MoE block, over
      // groups->expert(), counted there): that op's time includes them.
      if (op.group == ProcessGroup::Expert) return;
      return grads.quantized_hop(op);
    case OpKind::CopyH2D:
      return copy_to_device(op);
    case OpKind::CopyD2H:  // gradients, or ColossalAI's parameter shards
      if (op.bucket < 0 && op.layer >= 0) return params.move_shards(op, Device::Cpu);
      return grads.copy_to_host(op);
    case OpKind::OverflowCheck:
      if (delayed_ && !applies_delayed_update()) return;
      return optimizer.check_overflow(op);
    case OpKind::GradNorm:
      if (delayed_ && !applies_delayed_update()) return;
      return optimizer.compute_grad_norm(op);
    case OpKind::NvmeRead:
      return nvme_read(op);
    case OpKind::NvmeWrite:
      return nvme_write(op);
    case OpKind::OptimizerStep:
      return optimizer_step(op);
    case OpKind::LossScaleUpdate:
      return optimizer.update_loss_scale();
    case OpKind::Send:
      net.select_micro_batch(op.micro_step);
      return pipeline.send(op);
    case OpKind::Recv:
      net.select_micro_batch(op.micro_step);
      return pipeline.recv(op);
    default:
      throw std::logic_error(std::string("the CPU executor cannot run a ") + to_string(op.kind) +
                             " op yet");
  }
}

// The bytes of hpZ's secondary partition `op` allocates (> 0) or frees (< 0), as its effects say.
Bytes ZeroEngine::State::changes_secondary(const Op& op) const {
  Bytes bytes = 0;
  for (const MemEffect& effect : context.schedule.effects_of(op)) {
    if (effect.device == Device::Gpu && effect.component == Component::ParamsSecondary)
      bytes += effect.bytes;
  }
  return bytes;
}

// A TP collective of a layer runs inside it (TensorParallelOps); the expert tensors' reductions
// and gathers run over the expert-data-parallel group; any other group's op here is one the
// executor does not run.
void ZeroEngine::State::require_data_group(const Op& op) const {
  if (op.group == ProcessGroup::Data) return;
  if (op.group == ProcessGroup::ExpertData && context.layout.expert_dp_size > 0) return;
  throw std::logic_error(std::string("the CPU executor cannot run a ") + to_string(op.kind) +
                         " over the " + to_string(op.group) + " group here");
}

// Stage 3 gathers a layer before use, and the persistent tensors after the update; stages 1-2 the
// updated partitions. After a skipped step (fp16 overflow) nothing changed: no gather of updates.
void ZeroEngine::State::gather_parameters(const Op& op) {
  if (op.tensor_count > 0) return params.gather_tensors(op.first_tensor, op.tensor_count);
  if (context.stage.partitions_parameters() && op.layer >= 0)
    return params.gather_layer(std::size_t(op.layer), op.group == ProcessGroup::Secondary);
  if (optimizer.skipped()) return;
  if (context.stage.partitions_parameters()) return params.gather_persistent();
  params.gather_updated_shard(op);
}

// Before a stage-3 gather (parameter offload) the layer's partitions go to the device, or
// ColossalAI's placement moves its shards there; after a host update the new parameters go.
// A warm-up step of the delayed update runs its own update here, after its backward.
void ZeroEngine::State::copy_to_device(const Op& op) {
  if (op.layer >= 0 && context.schedule.context.colossalai)
    return params.move_shards(op, Device::Gpu);
  if (op.layer >= 0) return params.stage_layer_partition(std::size_t(op.layer));
  if (delayed_ && warmup_step()) {
    // The schedule's overflow and norm reductions, which the warm-up skipped where they stand.
    for (const Op& check : context.schedule.ops) {
      if (check.kind == OpKind::OverflowCheck) optimizer.check_overflow(check);
      if (check.kind == OpKind::GradNorm) optimizer.compute_grad_norm(check);
    }
    optimizer.step();
  }
  optimizer.write_back_params();
}

// ZeRO-Offload's delayed parameter update (the schedule's delayed OptimizerStep comes first): the
// previous step's gradients, on the host since its copies, are applied while this step's forward
// and backward run on the parameters written back before (one step stale). The first delayed step
// has none (the warm-up applied its own): it updates nothing and writes nothing back.
bool ZeroEngine::State::warmup_step() const {
  return step_index_ < context.config().zero.delay_param_update_warmup;
}

bool ZeroEngine::State::applies_delayed_update() const {
  return !warmup_step() && pending_gradients_;
}

void ZeroEngine::State::delayed_update() {
  if (warmup_step()) return;  // deferred to the write-back
  if (applies_delayed_update()) return optimizer.step();
  optimizer.mark_idle();
}

// A skipped step moves no sub-group: nothing changes.
void ZeroEngine::State::nvme_read(const Op& op) {
  if (op.swapped == Swapped::OptimizerStates) {
    if (!optimizer.skipped()) nvme.read_group(op.sub_group);
    return;
  }
  if (op.layer < 0)
    throw std::logic_error("schedule error: an NVMe read of neither a sub-group nor a layer");
  nvme.read_layer_partitions(std::size_t(op.layer));
}

// A parameter write waits for the partitions the updates so far streamed out (all of them after
// a host update; after a swapped sub-group's update, those it completed).
void ZeroEngine::State::nvme_write(const Op& op) {
  if (op.swapped == Swapped::OptimizerStates) {
    if (!optimizer.skipped()) nvme.write_group(op.sub_group);
    return;
  }
  nvme.finish_param_io();
}

void ZeroEngine::State::optimizer_step(const Op& op) {
  if (op.delayed) return delayed_update();
  if (context.optimizer_device == Device::Nvme) return optimizer.group_step(op.sub_group);
  optimizer.step();
}

// Global sample ids: micro-step m of rank r takes samples (m x dp + r) x micro_batch onwards, so
// any split of the same global batch over ranks and micro-steps sees the same samples.
void ZeroEngine::State::ensure_batch(std::int32_t micro_step) {
  if (!loaded_.insert(micro_step).second) return;
  const ScheduleContext& c = context.schedule.context;
  const std::int64_t global_batch = c.micro_batch * c.grad_accumulation * c.dp_size;
  const std::int64_t first =
      step_index_ * global_batch +
      (std::int64_t(micro_step) * context.data_parallel + context.data_rank) * c.micro_batch;
  net.load_batch(first, c.micro_batch);
}

void ZeroEngine::State::forward(const Op& op) {
  ensure_batch(op.micro_step);
  const auto layer = std::size_t(op.layer);
  net.forward(layer, params.layer_params(context.owner_of(layer)).views);
  // The model's last layer computes the loss (on a pipeline's last stage).
  if (layer + 1 == context.model.layers.size() && context.groups->last_stage()) {
    loss_sum_ += net.loss();
    ++losses_;
  }
}

// The loss of a step is the mean over its micro-steps, so each micro-step's gradient counts 1/ga;
// fp16 scales it by the loss scale too.
void ZeroEngine::State::backward(const Op& op) {
  const auto layer = std::size_t(op.layer);
  const std::size_t owner = context.owner_of(layer);
  const LayerParams layer_params = params.layer_params(owner);
  LayerGrads layer_grads = grads.layer_grads(owner);
  const double scale = optimizer.step_scale();
  net.backward(layer, layer_params.views, layer_grads.views,
               float(scale) / float(context.schedule.context.grad_accumulation));
  layer_grads.commit();
  inject_faults(op);
}

// The hook fires once the tensor's gradient is complete on this rank (after the backward of the
// layer owning it), in the first micro-step of the chosen step.
void ZeroEngine::State::inject_faults(const Op& op) {
  for (const GradientFault& fault : options.inject_inf) {
    if (fault.step != step_index_ || fault.rank != context.data_rank || op.micro_step != 0)
      continue;
    if (op.layer != context.layout.tensor_layer.at(std::size_t(fault.tensor))) continue;
    grads.inject_inf(fault.tensor, fault.element);
  }
}

StepReport ZeroEngine::State::finish_step() {
  nvme.finish_io();
  pipeline.finish_step();
  pending_gradients_ = delayed_ && !warmup_step();
  StepReport report;
  // The ranks that compute the loss (the last stage's) hold it alike across their TP group: one
  // of each TP group counts, averaged over the DP ranks.
  const ProcessGroups& groups = *context.groups;
  const bool counts = losses_ > 0 && groups.place().tensor == 0;
  const double mean_here = counts ? loss_sum_ / losses_ : 0;
  report.loss = groups.world().report_sum(mean_here) / context.data_parallel;
  report.grad_norm = optimizer.grad_norm();
  report.loss_scale = optimizer.step_scale();
  report.skipped = optimizer.skipped();
  return report;
}

}  // namespace zerolens::exec
