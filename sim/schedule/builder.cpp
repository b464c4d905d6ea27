// Builds one training step's ops for the representative rank (rank 0). The DeepSpeed behaviour each
// part follows is named in its comment; docs/schedule.md describes the whole sequence.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include "sim/schedule/builder.hpp"
#include "sim/schedule/colossalai.hpp"
#include "sim/schedule/gemini.hpp"
#include "sim/schedule/memory_replay.hpp"
#include "sim/schedule/param_layout.hpp"
#include "sim/schedule/pipeline_order.hpp"
#include "sim/schedule/zeropp.hpp"

namespace zerolens {
namespace {

constexpr std::uint32_t kNoOp = std::numeric_limits<std::uint32_t>::max();

// A short list of memory effects; with model-states-only accounting, activations, buffers and
// overhead are dropped here so every consumer sees the same filtered schedule.
class Effects {
 public:
  explicit Effects(bool model_states_only) : model_states_only_(model_states_only) {}
  Effects& add(Device device, Component component, Bytes bytes) {
    if (bytes == 0) return *this;
    if (model_states_only_) {
      const Category category = category_of(component);
      if (category == Category::Activations || category == Category::Buffers ||
          category == Category::Overhead) {
        return *this;
      }
    }
    if (count_ == items_.size())
      throw std::logic_error("schedule error: an op with too many effects");
    items_[count_++] = {device, component, bytes};
    return *this;
  }
  std::span<const MemEffect> items() const { return {items_.data(), count_}; }

 private:
  bool model_states_only_;
  std::array<MemEffect, 12> items_{};
  std::size_t count_ = 0;
};

class ScheduleBuilder {
 public:
  ScheduleBuilder(const Model& model, const TrainingConfig& config, const ResolvedBatch& batch,
                  std::int64_t seq_len, int dp_size, int gpus_per_node,
                  const ScheduleOptions& options, const GeminiStep* gemini = nullptr)
      : model_(model),
        config_(config),
        zero_(config.effective_zero()),
        fsdp_(config.is_fsdp()),
        colossalai_(config.is_colossalai()),
        delayed_update_(zero_.delay_param_update),
        options_(options),
        gemini_(gemini) {
    auto& c = schedule_.context;
    c.dp_size = dp_size;
    c.gpus_per_node = gpus_per_node;
    c.stage = zero_.stage;
    c.micro_batch = batch.micro_batch_per_gpu;
    c.seq_len = seq_len;
    // An encoder-decoder's decoder layers run over the target (default: as long as the source).
    if (model.has_target_sequence()) c.target_seq_len = config.target_seq_len.value_or(seq_len);
    c.grad_accumulation = batch.gradient_accumulation_steps;
    c.precision = config.precision.precision;
    c.optimizer_device = zero_.effective_offload(OffloadKind::Optimizer);
    c.param_device = zero_.effective_offload(OffloadKind::Param);
    c.activation_checkpointing = config.activation_checkpointing.enabled;
    c.model_states_only = options.model_states_only;
    c.tensor_parallel = model.tensor_parallel.size;
    c.sequence_parallel = model.tensor_parallel.active() && model.tensor_parallel.sequence_parallel;
    c.pipeline_parallel = model.pipeline.size;
    c.virtual_stages = model.pipeline.virtual_stages;
    c.pipeline_stage = model.pipeline_stage;
    c.expert_parallel = model.expert_parallel.size;
    c.shard_group =
        zero_.shard_group_size > 0 && zero_.shard_group_size < dp_size ? zero_.shard_group_size : 0;
    if (zero_.partitions_parameters()) {  // ZeRO++ (DeepSpeed reads it at stage 3 only)
      c.hpz_group = zero_.hpz_partition_size > 1 ? std::min(zero_.hpz_partition_size, dp_size) : 0;
      c.quantized_weights = zero_.quantized_weights;
      c.quantized_gradients = zero_.quantized_gradients;
    }
    c.colossalai = config.is_colossalai();
    c.shard_strategy = config.colossalai.shard_strategy;
    c.placement = config.colossalai.placement;
    c.delayed_update = zero_.delay_param_update;
    // Hybrid sharding partitions every state over a shard group instead of all data-parallel ranks.
    schedule_.layout = make_param_layout(model, zero_, c.shard_size(), options.model_states_only,
                                         config.precision.param_bytes(), c.expert_parallel);
    schedule_.allocator = options.allocator;
    if (options.model_states_only) schedule_.allocator = AllocatorSpec{.kind = AllocatorKind::Flat};
    param_bytes_ = config.precision.param_bytes();
    grad_bytes_ = config.precision.grad_bytes();
    state_bytes_ = config.optimizer.state_bytes_per_param();
    optimizer_device_ = device_of(c.optimizer_device);
    param_device_ = device_of(c.param_device);
    // A host optimizer updates an fp32 copy of the partition on the host; in fp32 training with
    // the parameters on the device that copy is a master of its own (DeepSpeed's ZeRO-Offload
    // clones the partition to fp32 whatever the dtype), with parameters offloaded it is them.
    const bool host_copy = optimizer_device_ != Device::Gpu && param_device_ == Device::Gpu;
    master_bytes_ = config.precision.mixed() || host_copy ? 4 : 0;
    partition_param_bytes_ = param_bytes_;
    if (fsdp_) {
      // FSDP keeps the sharded parameters in fp32 and casts them to the parameter dtype for the
      // all-gather (MixedPrecisionPolicy.param_dtype): the shard is the optimizer's master. Its
      // sharded gradients take the sharded parameters' dtype.
      partition_param_bytes_ = 4;
      master_bytes_ = 0;
      const Precision reduce = config.fsdp.reduce_dtype.value_or(config.precision.precision);
      reduce_bytes_ = reduce == Precision::Fp32 ? 4 : 2;
    }
    // Shards start where placement "cpu" keeps them, where Gemini's steady step finds them, or
    // (auto with reuse_fp16_shard) in host memory, where the previous step's relay left them.
    const bool reuse_offloaded =
        colossalai_ && config.colossalai.reuse_fp16_shard && optimizer_device_ != Device::Gpu;
    shard_on_host_.assign(schedule_.layout.tensor_numel.size(),
                          param_device_ == Device::Cpu || reuse_offloaded);
    if (gemini_) {
      for (std::size_t t = 0; t < shard_on_host_.size(); ++t)
        shard_on_host_[t] = !gemini_->start_on_gpu[t];
    }
    if (colossalai_) {
      bucket_row_ = colossalai_bucket_row_elements(config.colossalai.reduce_scatter_bucket_size_mb,
                                                   grad_bytes_, dp_size);
    }
    const std::size_t layers = model.layers.size();
    shard_op_.assign(layers, kNoOp);
    live_.assign(layers, false);
    gather_op_.assign(layers, kNoOp);
    prefetched_until_.assign(layers, -1);
    secondary_.assign(layers, false);
    grads_touched_.assign(layers, false);
    layer_stored_.assign(layers, 0);
    layer_trainable_.assign(layers, 0);
    layer_dequantized_.assign(layers, 0);
    for (std::size_t t = 0; t < params().tensor_numel.size(); ++t) {
      const auto layer = std::size_t(params().tensor_layer[t]);
      layer_stored_[layer] += params().tensor_stored[t];
      if (params().tensor_trainable[t]) layer_trainable_[layer] += params().tensor_numel[t];
      if (params().tensor_quantization_state[t] > 0)
        layer_dequantized_[layer] = std::max(layer_dequantized_[layer], params().tensor_numel[t]);
    }
    reserve_capacity();
  }

  // Gemini's inputs from a built schedule (its first pass): the uses of the first micro-step, each
  // with its sampling period's non-model peak (memstats_collector.py), the GPU's capacity and
  // where the shards start.
  GeminiInput gemini_input(const Schedule& schedule) const {
    GeminiInput input;
    // (build() has handed this builder's schedule over: read the built one.)
    for (const Elements partition : schedule.layout.tensor_partition)
      input.shard_bytes.push_back(partition * param_bytes_);
    input.uses = gemini_uses_;
    input.capacity = options_.gpu_capacity;
    input.on_gpu_at_start = !(colossal().reuse_fp16_shard && optimizer_device_ != Device::Gpu);
    input.shards_to_host_after_step = !input.on_gpu_at_start;
    const MemoryTimeline replay = replay_memory(schedule, ReplayDetail::Components);
    Bytes outside = 0;  // the CUDA context and workspaces: not max_memory_allocated's
    for (const auto& effect : schedule.resident) {
      if (effect.device == Device::Gpu && category_of(effect.component) == Category::Overhead)
        outside += effect.bytes;
    }
    std::vector<Bytes> first_micro;
    for (std::size_t use = 0; use < gemini_uses_.size() && gemini_micro_[use] == 0; ++use) {
      const std::size_t end = use + 1 < gemini_uses_.size() && gemini_micro_[use + 1] == 0
                                  ? gemini_period_[use + 1]
                                  : gemini_backward_end_;
      Bytes high = 0;
      for (std::size_t op = gemini_period_[use]; op < end; ++op)
        high = std::max(high, replay.high_during_op[op][std::size_t(Device::Gpu)]);
      const auto& sampled = replay.states[gemini_sample_[use]][std::size_t(Device::Gpu)];
      const Bytes model = sampled[std::size_t(Component::ParamsPartition)] +
                          sampled[std::size_t(Component::GradsPartition)] +
                          sampled[std::size_t(Component::MasterPartition)];
      first_micro.push_back(std::max<Bytes>(0, high - outside - model));
    }
    for (std::size_t use = 0; use < gemini_uses_.size(); ++use)
      input.non_model.push_back(first_micro.empty() ? 0 : first_micro[use % first_micro.size()]);
    return input;
  }

  Schedule build() {
    add_resident();
    add_initialization();
    if (model_.pipeline.active()) return build_pipeline_stage();
    build_use_order();
    if (delayed_update_) delayed_host_optimizer();
    const auto micro_steps = schedule_.context.grad_accumulation;
    for (std::int64_t micro = 0; micro < micro_steps; ++micro) {
      micro_ = std::int32_t(micro);
      forward();
      backward();
      if (colossalai_) {
        end_colossalai_backward();
      } else if (!zero_.reduces_at_boundary()) {
        flush_bucket();
      }
      if (zero_.partitions_parameters()) release_all_gathered();
    }
    if (zero_.reduces_at_boundary()) reduce_at_boundary();
    optimizer_step();
    return std::move(schedule_);
  }

 private:
  // ---- emission ----------------------------------------------------------------------------
  std::uint32_t emit(Op op, const Effects& effects, std::initializer_list<std::uint32_t> deps) {
    op.micro_step = micro_;
    op.effects_begin = std::uint32_t(schedule_.effects.size());
    for (const auto& effect : effects.items()) schedule_.effects.push_back(effect);
    op.effects_count = std::uint32_t(effects.items().size());
    op.deps_begin = std::uint32_t(schedule_.dependencies.size());
    for (const auto dep : deps) {
      if (dep != kNoOp) schedule_.dependencies.push_back(dep);
    }
    op.deps_count = std::uint32_t(schedule_.dependencies.size()) - op.deps_begin;
    schedule_.ops.push_back(op);
    if (op.stream == Stream::Compute) last_compute_ = std::uint32_t(schedule_.ops.size() - 1);
    return std::uint32_t(schedule_.ops.size() - 1);
  }
  Effects effects() const { return Effects(options_.model_states_only); }

  void reserve_capacity() {
    // Layers emit a handful of ops each; reduce buckets (one or more per tensor, and at least one
    // per reduce_bucket_size elements) a few more.
    const auto tensors = std::size_t(params().tensor_numel.size());
    const auto buckets = tensors + std::size_t(params().total / std::max<Elements>(1, zero_.reduce_bucket_size));
    const std::size_t per_micro = model_.layers.size() * 8 + buckets * 4 + 16;
    const auto micro_steps = std::size_t(schedule_.context.grad_accumulation);
    schedule_.ops.reserve(per_micro * micro_steps + 64);
    schedule_.effects.reserve(per_micro * micro_steps * 3 + 64);
    schedule_.dependencies.reserve(per_micro * micro_steps * 2 + 64);
  }

  void resident(Device device, Component component, Bytes bytes) {
    Effects single = effects();
    single.add(device, component, bytes);
    for (const auto& effect : single.items()) schedule_.resident.push_back(effect);
  }

  // ---- facts -------------------------------------------------------------------------------
  const ParamLayout& params() const { return schedule_.layout; }
  // The ranks a state is partitioned over, and every gather and reduce-scatter runs over: all
  // data-parallel ranks, or a shard group under hybrid sharding.
  int dp() const { return schedule_.context.shard_size(); }
  int hpz() const { return schedule_.context.hpz_group; }
  bool quantized_weights() const { return schedule_.context.quantized_weights; }
  int owner_of(std::size_t layer) const {
    const int shared = model_.layers[layer].shares_params_of;
    return shared >= 0 ? shared : int(layer);
  }
  bool checkpointed(std::size_t layer) const {
    return config_.activation_checkpointing.enabled &&
           model_.layers[layer].kind == LayerKind::TransformerBlock;
  }
  // A checkpointed layer's activations besides its input: the recompute (like the forward) reads
  // the kept checkpoint in place (torch.utils.checkpoint detaches it, sharing its storage).
  static Bytes recomputed_bytes(const ActivationBytes& act) { return std::max<Bytes>(0, act.stored - act.checkpoint); }
  ActivationBytes activations(std::size_t layer) const {
    const auto& c = schedule_.context;
    return model_.layers[layer].activation_bytes(c.micro_batch, c.seq_len, param_bytes_,
                                                 c.target_seq_len);
  }
  // Elements an owner's tensors are stored in (what is gathered, read and reused), and those of
  // its trainable ones (what has gradients).
  Elements owner_numel(int owner) const { return layer_stored_[std::size_t(owner)]; }
  Elements owner_trainable(int owner) const { return layer_trainable_[std::size_t(owner)]; }
  // bitsandbytes' MatMul4Bit dequantizes a 4-bit weight into a new 16-bit tensor for its matmul,
  // in forward and again in backward (autograd/_functions.py, 0.49: F.linear(A,
  // dequantize_4bit(B).t()); grad_A = matmul(grad_output, dequantize_4bit(B).t())), freed after
  // it: the owner's largest such weight at once.
  Bytes dequantized_bytes(int owner) const {
    return layer_dequantized_[std::size_t(owner)] * param_bytes_;
  }
  // Stage 3: elements gathered for an owner (non-persistent tensors, padded to a partition per
  // rank of the group each is partitioned over: an expert's over the expert-data-parallel ranks).
  Elements gathered_elements(int owner) const {
    Elements total = 0;
    for (auto t = params().layer_first_tensor[std::size_t(owner)];
         t < params().layer_first_tensor[std::size_t(owner) + 1]; ++t) {
      if (!params().tensor_persistent[std::size_t(t)])
        total += params().tensor_partition[std::size_t(t)] * params().group_size_of(std::size_t(t));
    }
    return total;
  }
  // The partitioned tensors of `owner`: each is read from NVMe as a request of its own.
  std::int32_t owner_partitioned_tensors(int owner) const {
    std::int32_t count = 0;
    for (auto t = params().layer_first_tensor[std::size_t(owner)];
         t < params().layer_first_tensor[std::size_t(owner) + 1]; ++t) {
      if (!params().tensor_persistent[std::size_t(t)]) ++count;
    }
    return count;
  }
  // hpZ: an owner's secondary partition (its gathered tensors over the group's ranks), and the
  // bytes of those made so far this step (`only_made`: secondary_), or of every owner.
  Bytes secondary_bytes(int owner) const {
    return hpz() > 0 ? gathered_elements(owner) / hpz() * param_bytes_ : 0;
  }
  Bytes secondary_partition_bytes(bool only_made) const {
    Bytes total = 0;
    for (std::size_t owner = 0; owner < model_.layers.size(); ++owner) {
      if (!only_made || secondary_[owner]) total += secondary_bytes(int(owner));
    }
    return total;
  }

  Elements owner_partition_elements(int owner) const {
    Elements total = 0;
    for (auto t = params().layer_first_tensor[std::size_t(owner)];
         t < params().layer_first_tensor[std::size_t(owner) + 1]; ++t) {
      if (!params().tensor_persistent[std::size_t(t)]) total += params().tensor_partition[std::size_t(t)];
    }
    return total;
  }

  // ---- initialisation: what is allocated before the step ----------------------------------
  void add_resident() {
    const ParamLayout& p = params();
    if (!zero_.partitions_parameters()) {
      resident(Device::Gpu, Component::ParamsFull, p.stored * param_bytes_);
    } else {
      std::array<Elements, kDeviceCount> partition{};
      for (std::size_t t = 0; t < p.tensor_partition.size(); ++t) {
        const Device device = colossalai_ ? shard_device(std::int32_t(t)) : param_device_;
        partition[std::size_t(device)] += p.tensor_partition[t];
      }
      for (int d = 0; d < kDeviceCount; ++d)
        resident(Device(d), Component::ParamsPartition,
                 partition[std::size_t(d)] * partition_param_bytes_);
      resident(Device::Gpu, Component::ParamsPersistent, p.persistent * param_bytes_);
      if (param_device_ == Device::Nvme) {
        resident(Device::Cpu, Component::NvmeSwapBuffers,
                 Bytes(zero_.offload_param.buffer_count) * zero_.offload_param.buffer_size * param_bytes_);
      }
    }
    // The 4-bit weights' constants are tensors of their quant_state, not parameters: whole on every
    // rank whatever the stage.
    resident(Device::Gpu, Component::ParamsQuantizationState, p.quantization_state);
    resident(optimizer_device_, Component::MasterPartition, p.owned * master_bytes_);
    resident(optimizer_device_, Component::OptimizerStatePartition, p.owned * state_bytes_);
    if (colossalai_) {
      // ColossalAI saves each gradient shard as its reduction ends (sharded_model_v2.py _save_grad)
      // and frees it after the step.
    } else if (zero_.partitions_optimizer_states() && optimizer_device_ != Device::Gpu) {
      // DeepSpeed keeps the fp32 gradient partition in (pinned) host memory when offloading.
      resident(Device::Cpu, Component::GradsPartition, p.owned * 4);
    } else if (zero_.partitions_parameters() && !fsdp_) {
      // (FSDP allocates each sharded gradient at its unit's first reduce-scatter.)
      resident(Device::Gpu, Component::GradsPartition, p.owned * grad_bytes_);
    }
    if (zero_.partitions_parameters() && zero_.contiguous_gradients) {
      resident(Device::Gpu, Component::ReduceBucket, zero_.reduce_bucket_size * grad_bytes_);
    }
    if (optimizer_device_ == Device::Nvme) {
      const Elements chunk = std::min(p.sub_group_elements(zero_.sub_group_size), p.owned);
      resident(Device::Cpu, Component::NvmeSwapBuffers,
               Bytes(zero_.offload_optimizer.buffer_count) * chunk * 4);
    }
    resident(Device::Gpu, Component::CudaContext, options_.cuda_context_bytes);
    resident(Device::Gpu, Component::LibraryWorkspace, options_.library_workspace_bytes);
  }

  // From process start to the step. DeepSpeed's engine converts the module to the training dtype
  // and moves it to the GPU whole (engine.py _configure_distributed_model); stage 3 then partitions
  // it and frees the rest before the optimizer creates its fp32 partitions, unless the model was
  // built inside zero.Init, where each module's parameters are partitioned as soon as its
  // constructor returns (partition_parameters.py _post_init_method): only the largest layer is ever
  // whole. Then the optimizer creates its states by stepping once on a zeroed fp32 gradient
  // (stage_1_and_2.py and stage3.py initialize_optimizer_states: the partition; stage 3 its largest
  // sub-group), which it frees.
  void add_initialization() {
    const ParamLayout& p = params();
    // (An FSDP module is built in fp32 and cast per unit by the all-gather.)
    const Bytes whole = p.stored * (fsdp_ ? 4 : param_bytes_);
    Bytes largest_layer = 0;
    for (const Elements numel : layer_stored_)
      largest_layer = std::max(largest_layer, numel * param_bytes_);
    for (std::size_t mode = 0; mode < 2; ++mode) {
      auto& init = schedule_.initialization[mode];
      // ShardedModelV2 asserts every module was built inside ZeroInitContext, which shards each
      // module's parameters as its constructor returns (init_context.py _post_init_method).
      const bool whole_first =
          zero_.partitions_parameters() && mode == Schedule::kInitWholeModel && !colossalai_;
      const Bytes transient = zero_.partitions_parameters() && !whole_first ? largest_layer : 0;
      // The parameters first (the whole model is freed once partitioned), then the optimizer's.
      const auto is_params = [](const MemEffect& e) {
        return category_of(e.component) == Category::Params;
      };
      if (whole_first) init.push_back({Device::Gpu, Component::ParamsFull, whole});
      if (transient > 0) init.push_back({Device::Gpu, Component::ParamsFull, transient});
      for (const auto& effect : schedule_.resident) {
        if (is_params(effect)) init.push_back(effect);
      }
      if (whole_first) init.push_back({Device::Gpu, Component::ParamsFull, -whole});
      if (transient > 0) init.push_back({Device::Gpu, Component::ParamsFull, -transient});
      // hpZ: partitioning at initialisation makes every secondary partition too; they last until
      // the first step's update invalidates them (the steady step makes its own in forward).
      const Bytes secondary = secondary_partition_bytes(false);
      if (secondary > 0) init.push_back({Device::Gpu, Component::ParamsSecondary, secondary});
      for (const auto& effect : schedule_.resident) {
        if (!is_params(effect)) init.push_back(effect);
      }
      // torch's optimizers and ColossalAI's HybridAdam create their states at their first step.
      if (!options_.model_states_only && p.owned > 0 && !fsdp_ && !colossalai_) {
        init.push_back({optimizer_device_, Component::Fp32GradCast, fp32_gradient_elements() * 4});
        init.push_back({optimizer_device_, Component::Fp32GradCast, -fp32_gradient_elements() * 4});
      }
      if (secondary > 0) init.push_back({Device::Gpu, Component::ParamsSecondary, -secondary});
    }
  }

  // ---- stage 3: parameter gathering (DeepSpeed's PartitionedParameterCoordinator) ---------
  void build_use_order() {
    if (!zero_.partitions_parameters()) return;
    auto push = [&](std::size_t layer) {
      const int owner = owner_of(layer);
      if (gathered_elements(owner) > 0) use_owner_.push_back(owner), use_layer_.push_back(int(layer));
    };
    for (std::size_t layer = 0; layer < model_.layers.size(); ++layer) push(layer);
    for (std::size_t layer = model_.layers.size(); layer-- > 0;) push(layer);
  }

  std::uint32_t gather(int owner, Phase phase) {
    if (colossalai_) return gather_colossalai(owner, phase);
    const Elements partition = owner_partition_elements(owner);
    const Elements full = gathered_elements(owner);
    std::uint32_t copy_op = kNoOp;
    if (param_device_ == Device::Nvme) {
      copy_op = emit(Op{.kind = OpKind::NvmeRead,
                        .stream = Stream::Nvme,
                        .phase = phase,
                        .layer = owner,
                        .link = Link::NvmeRead,
                        .bytes = partition * param_bytes_,
                        .io_requests = owner_partitioned_tensors(owner),
                        .swapped = Swapped::Parameters},
                     effects(), {});
    }
    if (param_device_ != Device::Gpu) {
      Effects staging = effects();
      staging.add(Device::Gpu, Component::OffloadStaging, partition * param_bytes_);
      copy_op = emit(Op{.kind = OpKind::CopyH2D, .stream = Stream::H2D, .phase = phase, .layer = owner,
                        .link = Link::PcieH2D, .bytes = partition * param_bytes_},
                     staging, {copy_op});
    }
    Effects gathered = effects();
    // FSDP casts the fp32 shard into an all-gather input buffer (foreach_all_gather's copy-in)
    // that lives until the all-gather ends.
    const Bytes copy_in = fsdp_ && param_device_ == Device::Gpu ? partition * param_bytes_ : 0;
    gathered.add(Device::Gpu, Component::GatheredParams, copy_in);
    // hpZ: once forward has made the secondary partition, fetches gather it within the group.
    const bool secondary = hpz() > 0 && secondary_[std::size_t(owner)];
    const int world = secondary ? hpz() : dp();
    const Elements sent = full / world;  // this rank's (secondary) partition
    const Bytes quantized = quantized_weights() ? world * qwz_send_bytes(sent) : 0;
    // qwZ: the gathered int8 and scales, dequantized into a 16-bit flat tensor, from which the
    // parameters are copied; both freed once the handle has waited.
    const Bytes dequantized = quantized > 0 ? quantized + 2 * full : 0;
    gathered.add(Device::Gpu, Component::GatheredParams, dequantized);
    gathered.add(Device::Gpu, Component::GatheredParams, full * param_bytes_);
    gathered.add(Device::Gpu, Component::GatheredParams, -copy_in - dequantized);
    if (param_device_ != Device::Gpu) {
      gathered.add(Device::Gpu, Component::OffloadStaging, -partition * param_bytes_);
    }
    const auto op = emit(Op{.kind = OpKind::AllGather,
                            .stream = Stream::Collective,
                            .phase = phase,
                            .layer = owner,
                            .group_size = world,
                            .group = secondary ? ProcessGroup::Secondary : ProcessGroup::Data,
                            .link = Link::Network,
                            .bytes = quantized > 0 ? quantized : full * param_bytes_,
                            .wire_element_bytes = quantized > 0 ? 1 : std::int32_t(param_bytes_)},
                         gathered, {copy_op});
    live_[std::size_t(owner)] = true;
    live_elements_ += full;
    gather_op_[std::size_t(owner)] = op;
    return op;
  }

  void release(int owner, Phase phase) {
    if (colossalai_) return release_colossalai(owner, phase);
    const Elements full = gathered_elements(owner);
    Effects freed = effects();
    // hpZ: partitioning a gathered parameter copies this rank's slice of the group's secondary
    // partition out of it first (partition_parameters.py _partition -> _partition_param_sec),
    // once per step: the optimizer step's _post_step invalidates every secondary tensor.
    if (hpz() > 0 && !secondary_[std::size_t(owner)]) {
      secondary_[std::size_t(owner)] = true;
      freed.add(Device::Gpu, Component::ParamsSecondary, secondary_bytes(owner));
    }
    freed.add(Device::Gpu, Component::GatheredParams, -full * param_bytes_);
    emit(Op{.kind = OpKind::Release, .stream = Stream::Compute, .phase = phase, .layer = owner}, freed,
         {});
    live_[std::size_t(owner)] = false;
    live_elements_ -= full;
  }

  // Before use `t`: gather its owner if needed, then prefetch upcoming owners.
  void before_use(std::size_t t, Phase phase) {
    const int owner = use_owner_[t];
    if (!live_[std::size_t(owner)]) gather(owner, phase);
    const Elements budget =
        std::min(zero_.stage3_max_live_parameters - live_elements_, zero_.stage3_prefetch_bucket_size);
    Elements prefetching = 0;
    for (std::size_t u = t + 1; u < use_owner_.size() && prefetching < budget; ++u) {
      const int next = use_owner_[u];
      prefetched_until_[std::size_t(next)] = std::max(prefetched_until_[std::size_t(next)], std::int64_t(u));
      if (!live_[std::size_t(next)]) {
        gather(next, phase);
        prefetching += gathered_elements(next);
      }
    }
  }

  // After use `t`: release unless reused within stage3_max_reuse_distance elements or already
  // scanned by a prefetch for a later use.
  void after_use(std::size_t t, Phase phase) {
    const int owner = use_owner_[t];
    if (prefetched_until_[std::size_t(owner)] > std::int64_t(t)) return;
    Elements traversed = 0;
    for (std::size_t u = t + 1; u < use_owner_.size(); ++u) {
      if (traversed >= zero_.stage3_max_reuse_distance) break;
      if (use_owner_[u] == owner) return;
      traversed += owner_numel(use_owner_[u]);
    }
    release(owner, phase);
  }

  void release_all_gathered() {
    for (std::size_t owner = 0; owner < live_.size(); ++owner) {
      if (live_[owner]) release(int(owner), Phase::Backward);
    }
    std::fill(prefetched_until_.begin(), prefetched_until_.end(), -1);
  }

  // ---- forward -----------------------------------------------------------------------------
  void forward() {
    std::size_t use = 0;
    for (std::size_t layer = 0; layer < model_.layers.size(); ++layer) {
      const bool stage3_use = zero_.partitions_parameters() && use < use_layer_.size() &&
                              use_layer_[use] == int(layer) && use < use_owner_.size() / 2;
      if (stage3_use) before_use(use, Phase::Forward);
      forward_layer(layer);
      if (stage3_use) after_use(use++, Phase::Forward);
    }
  }

  void forward_layer(std::size_t layer) {
    const ActivationBytes act = activations(layer);
    const Layer& spec = model_.layers[layer];
    const auto& ckpt = config_.activation_checkpointing;
    Effects fx = effects();
    if (checkpointed(layer)) {
      fx.add(Device::Gpu, Component::ActivationWorking, recomputed_bytes(act));
      fx.add(Device::Gpu, Component::ActivationWorking, -recomputed_bytes(act));
      fx.add(Device::Gpu, Component::ActivationCheckpoints, act.checkpoint);
    } else {
      fx.add(Device::Gpu, Component::ActivationsStored, act.stored);
    }
    const int owner = owner_of(layer);
    add_dequantized(fx, owner);
    fx.add(Device::Gpu, Component::ActivationWorking, act.forward_working);
    fx.add(Device::Gpu, Component::ActivationWorking, -act.forward_working);
    const auto& c = schedule_.context;
    const double flops = spec.forward_flops(c.micro_batch, c.seq_len, c.target_seq_len);
    const Bytes touched = owner_numel(owner) * param_bytes_ + act.stored + act.forward_working;
    const auto op = emit(Op{.kind = OpKind::Forward,
                            .stream = Stream::Compute,
                            .phase = Phase::Forward,
                            .layer = int(layer),
                            .flops = flops,
                            .memory_bytes_touched = touched},
                         fx, {gather_dep(owner), blocking_reduce_, tp_wait_});
    blocking_reduce_ = kNoOp;
    tensor_parallel_collectives(layer, spec.tp_forward, Phase::Forward, op);
    expert_exchanges(layer, Phase::Forward, op);
    if (checkpointed(layer) && ckpt.cpu_checkpointing) {
      Effects moved = effects();
      moved.add(Device::Cpu, Component::ActivationCheckpoints, act.checkpoint);
      moved.add(Device::Gpu, Component::ActivationCheckpoints, -act.checkpoint);
      emit(Op{.kind = OpKind::CopyD2H, .stream = Stream::D2H, .phase = Phase::Forward, .layer = int(layer),
              .link = Link::PcieD2H, .bytes = act.checkpoint},
           moved, {op});
    }
  }

  void add_dequantized(Effects& fx, int owner) const {
    fx.add(Device::Gpu, Component::DequantizedWeight, dequantized_bytes(owner));
    fx.add(Device::Gpu, Component::DequantizedWeight, -dequantized_bytes(owner));
  }

  std::uint32_t gather_dep(int owner) const {
    return zero_.partitions_parameters() ? gather_op_[std::size_t(owner)] : kNoOp;
  }

  // ---- backward ----------------------------------------------------------------------------
  void backward() {
    if (micro_ == 0) allocate_reduce_buffers();
    std::size_t use = use_owner_.size() / 2;
    for (std::size_t layer = model_.layers.size(); layer-- > 0;) {
      const bool stage3_use =
          zero_.partitions_parameters() && use < use_layer_.size() && use_layer_[use] == int(layer);
      if (stage3_use) before_use(use, Phase::Backward);
      backward_layer(layer);
      if (stage3_use) after_use(use++, Phase::Backward);
    }
  }

  void backward_layer(std::size_t layer) {
    const ActivationBytes act = activations(layer);
    const Layer& spec = model_.layers[layer];
    const int owner = owner_of(layer);
    const auto& c = schedule_.context;
    const double forward_flops = spec.forward_flops(c.micro_batch, c.seq_len, c.target_seq_len);
    std::uint32_t recompute = kNoOp;
    if (checkpointed(layer)) recompute = recompute_layer(layer, act, forward_flops);
    // Effects in the order they happen: buffers and gradients appear, the working set comes and
    // goes, then the layer's activations are freed.
    Effects fx = effects();
    if (pending_ipg_alloc_ && !zero_.reduce_buffers_at_first_hook) {  // as backward() starts
      fx.add(Device::Gpu, Component::ReduceBucket, ipg_bytes_);
      pending_ipg_alloc_ = false;
    }
    add_gradient_allocation(fx, owner);
    const bool ready = layer_makes_grads_ready(layer);
    if (ready && colossalai_) add_colossalai_hooks(fx, owner);
    fx.add(Device::Gpu, Component::ActivationWorking, act.backward_working);
    add_dequantized(fx, owner);
    fx.add(Device::Gpu, Component::ActivationWorking, -act.backward_working);
    if (checkpointed(layer)) {
      fx.add(Device::Gpu, Component::ActivationWorking, -recomputed_bytes(act));
      fx.add(Device::Gpu, Component::ActivationCheckpoints, -act.checkpoint);
    } else {
      fx.add(Device::Gpu, Component::ActivationsStored, -act.stored);
    }
    if (ready && pending_ipg_alloc_) {  // the first gradient hook allocates the reduce buffers
      fx.add(Device::Gpu, Component::ReduceBucket, ipg_bytes_);
      pending_ipg_alloc_ = false;
    }
    if (ready && !zero_.reduces_at_boundary()) {
      fx.add(Device::Gpu, Component::UnreducedGrads, -copied_at_hook(owner) * grad_bytes_);
    }
    const Bytes touched = 2 * (owner_numel(owner) * param_bytes_ + act.stored) + act.backward_working;
    const auto op =
        emit(Op{.kind = OpKind::Backward,
                .stream = Stream::Compute,
                .phase = Phase::Backward,
                .layer = int(layer),
                .flops = spec.backward_flops(c.micro_batch, c.seq_len, c.target_seq_len),
                .memory_bytes_touched = touched},
             fx, {gather_dep(owner), recompute, blocking_reduce_, tp_wait_});
    last_backward_ = op;
    blocking_reduce_ = kNoOp;
    tensor_parallel_collectives(layer, spec.tp_backward, Phase::Backward, op);
    expert_exchanges(layer, Phase::Backward, op);
    if (ready && colossalai_) {
      reduce_colossalai(owner, op);
    } else if (ready && !zero_.reduces_at_boundary()) {
      add_to_buckets(owner, op);
    }
  }

  // DeepSpeed's partition_activations (activation_checkpointing/checkpointing.py): each
  // tensor-parallel rank keeps 1/mp_size of a checkpoint (partition_activations ->
  // get_partition_size; the model's checkpoint terms are divided already, plan.cpp), and the
  // recompute first all-gathers the whole input in the model-parallel group
  // (gather_partitioned_activations: all_gather_into_tensor into a new full-size tensor, which the
  // recompute then reads in place of the part: recomputed_bytes holds for the part's size).
  std::uint32_t gather_partitioned_checkpoint(std::size_t layer, const ActivationBytes& act,
                                              std::uint32_t after) {
    const int tp = schedule_.context.tensor_parallel;
    if (!config_.activation_checkpointing.partition_activations || tp <= 1 || act.checkpoint <= 0)
      return after;
    const auto op = emit(Op{.kind = OpKind::AllGather,
                            .stream = Stream::TensorParallel,
                            .phase = Phase::Backward,
                            .layer = int(layer),
                            .group_size = tp,
                            .group = ProcessGroup::Tensor,
                            .link = Link::Network,
                            .bytes = act.checkpoint * tp,
                            .wire_element_bytes = std::int32_t(param_bytes_)},
                         effects(), {after, tp_wait_});
    tp_wait_ = op;
    return op;
  }

  std::uint32_t recompute_layer(std::size_t layer, const ActivationBytes& act, double flops) {
    std::uint32_t copy = kNoOp;
    if (config_.activation_checkpointing.cpu_checkpointing) {
      Effects back = effects();
      back.add(Device::Gpu, Component::ActivationCheckpoints, act.checkpoint);
      back.add(Device::Cpu, Component::ActivationCheckpoints, -act.checkpoint);
      copy = emit(Op{.kind = OpKind::CopyH2D, .stream = Stream::H2D, .phase = Phase::Backward,
                     .layer = int(layer), .link = Link::PcieH2D, .bytes = act.checkpoint},
                  back, {});
    }
    copy = gather_partitioned_checkpoint(layer, act, copy);
    Effects fx = effects();
    fx.add(Device::Gpu, Component::ActivationWorking, recomputed_bytes(act));
    add_dequantized(fx, owner_of(layer));
    const Bytes touched = owner_numel(owner_of(layer)) * param_bytes_ + act.stored;
    const auto op = emit(Op{.kind = OpKind::Recompute,
                            .stream = Stream::Compute,
                            .phase = Phase::Backward,
                            .layer = int(layer),
                            .flops = flops,
                            .memory_bytes_touched = touched},
                         fx, {copy, gather_dep(owner_of(layer)), blocking_reduce_, tp_wait_});
    // A recompute runs the forward again, its tensor-parallel collectives and expert-parallel
    // exchanges included; the backward waits for them.
    tensor_parallel_collectives(layer, model_.layers[layer].tp_forward, Phase::Backward, op);
    expert_exchanges(layer, Phase::Backward, op);
    return op;
  }

  // DeepSpeed 0.19.8's stages 1-2 allocate the reduce (ipg) buffers, two with overlap_comm, when
  // the first gradient hook of a step fires (stage_1_and_2.py: process_gradients -> setup_buckets,
  // hooks made whenever contiguous_gradients is on): after the first backward that completes a
  // parameter's gradient, its activations already freed. A tied LM head completes none (wte's
  // gradient is whole only after the embedding's backward), so with GPT-2 the buffers come after
  // ln_f's backward, when the loss's logits and their gradients are gone. Older DeepSpeed allocated
  // them as backward() began (zero.reduce_buffers_at_first_hook false), before the first backward's
  // working set.
  void allocate_reduce_buffers() {
    if (!zero_.zero_stage().uses_flat_partition() || !zero_.contiguous_gradients || ipg_bytes_ > 0)
      return;
    ipg_bytes_ = Bytes(zero_.overlap() ? 2 : 1) * zero_.reduce_bucket_size * grad_bytes_;
    pending_ipg_alloc_ = true;
  }

  // ---- pipeline parallelism ------------------------------------------------------------------
  // One stage's step (ZeRO stage 0-1: gradients reduced once, after the last micro-batch): its
  // chunks' forwards and backwards in the schedule's order (sim/schedule/pipeline_order.hpp), with
  // the activations received before and sent after each; then the tied embedding's gradients
  // summed between the first and last stage, the data-parallel reduction and the update, in
  // DeepSpeed's order (pipe/schedule.py TrainSchedule: ReduceTiedGrads, ReduceGrads,
  // OptimizerStep): the tied copies are summed whole, before ZeRO-1 keeps a partition of them.
  Schedule build_pipeline_stage() {
    const auto& c = schedule_.context;
    for (const PipelineUnit& unit :
         pipeline_order(model_.pipeline, c.pipeline_stage, c.grad_accumulation)) {
      micro_ = unit.micro;
      const PipelineChunk& chunk = model_.pipeline_chunks[std::size_t(unit.chunk)];
      if (unit.forward) {
        forward_chunk(chunk);
      } else {
        backward_chunk(chunk);
      }
    }
    tied_embedding_gradients(kNoOp);
    reduce_at_boundary();
    optimizer_step();
    return std::move(schedule_);
  }

  int chunk_count() const { return model_.pipeline.size * model_.pipeline.virtual_stages; }
  int stage_of_chunk(int global) const { return global % model_.pipeline.size; }

  void forward_chunk(const PipelineChunk& chunk) {
    const int g = chunk.global_index;
    if (g > 0) pipeline_transfer(OpKind::Recv, Phase::Forward, g - 1, stage_of_chunk(g - 1));
    for (std::size_t layer = chunk.first; layer < chunk.end; ++layer) forward_layer(layer);
    if (g + 1 < chunk_count())
      pipeline_transfer(OpKind::Send, Phase::Forward, g, stage_of_chunk(g + 1));
  }

  void backward_chunk(const PipelineChunk& chunk) {
    const int g = chunk.global_index;
    if (g + 1 < chunk_count())
      pipeline_transfer(OpKind::Recv, Phase::Backward, g + 1, stage_of_chunk(g + 1));
    allocate_reduce_buffers();
    for (std::size_t layer = chunk.end; layer-- > chunk.first;) backward_layer(layer);
    if (g > 0) pipeline_transfer(OpKind::Send, Phase::Backward, g, stage_of_chunk(g - 1));
  }

  // The activations (forward) or their gradients (backward) at a chunk boundary: b x s x h in the
  // activation dtype, split along the sequence under sequence parallelism (Megatron core's
  // p2p_communication tensor shape). `sender` is the global chunk that sends.
  void pipeline_transfer(OpKind kind, Phase phase, int sender, int peer) {
    const auto& c = schedule_.context;
    const auto hidden = model_.shape ? model_.shape->hidden : 0;
    const Elements elements =
        c.micro_batch * c.seq_len * hidden / (c.sequence_parallel ? c.tensor_parallel : 1);
    const std::uint32_t last =
        schedule_.ops.empty() ? kNoOp : std::uint32_t(schedule_.ops.size() - 1);
    tp_wait_ = emit(Op{.kind = kind,
                       .stream = Stream::Pipeline,
                       .phase = phase,
                       .group_size = 2,
                       .group = ProcessGroup::Pipeline,
                       .peer_stage = peer,
                       .chunk = sender,
                       .link = Link::Network,
                       .bytes = elements * param_bytes_,
                       .wire_element_bytes = std::int32_t(param_bytes_)},
                    effects(), {last});
  }

  // Megatron's _allreduce_word_embedding_grads: the first stage's word embeddings and the last
  // stage's copy (the tied LM head) sum their gradients over the two-rank embedding group.
  std::uint32_t tied_embedding_gradients(std::uint32_t before) {
    if (!model_.tied_embedding_end) return before;
    const auto& c = schedule_.context;
    const bool first = c.pipeline_stage == 0;
    const Layer& holder = first ? model_.layers.front() : model_.layers.back();
    const TensorSpec* tied =
        holder.params.empty() ? nullptr : &(first ? holder.params.front() : holder.params.back());
    if (!tied || !tied->trainable) return before;  // a frozen embedding has no gradient to sum
    const Elements elements = tied->numel();
    return emit(Op{.kind = OpKind::AllReduce,
                   .stream = Stream::Collective,
                   .phase = Phase::Reduce,
                   .group_size = 2,
                   .group = ProcessGroup::Pipeline,
                   .peer_stage = first ? c.pipeline_parallel - 1 : 0,
                   .link = Link::Network,
                   .bytes = elements * grad_bytes_,
                   .wire_element_bytes = std::int32_t(grad_bytes_)},
                effects(),
                {before, schedule_.ops.empty() ? kNoOp : std::uint32_t(schedule_.ops.size() - 1)});
  }

  // ---- tensor parallelism --------------------------------------------------------------------
  // The layer's collectives over its TP group after `compute`, one after the other; the next
  // compute op waits for the last (Megatron's layers use their results at once).
  void tensor_parallel_collectives(std::size_t layer, const std::vector<TpCollective>& collectives,
                                   Phase phase, std::uint32_t compute) {
    const auto& c = schedule_.context;
    const double tokens = double(c.micro_batch) * double(c.seq_len);
    std::uint32_t previous = compute;
    for (const auto& collective : collectives) {
      const Bytes element = collective.fp32 ? 4 : param_bytes_;
      const Bytes bytes = Bytes(std::llround(collective.elements_per_token * tokens)) * element;
      previous = emit(Op{.kind = tp_op_kind(collective.kind),
                         .stream = Stream::TensorParallel,
                         .phase = phase,
                         .layer = int(layer),
                         .group_size = c.tensor_parallel,
                         .group = ProcessGroup::Tensor,
                         .link = Link::Network,
                         .bytes = bytes,
                         .wire_element_bytes = std::int32_t(element)},
                      effects(), {previous});
      tp_wait_ = previous;
    }
  }
  static OpKind tp_op_kind(TpCollectiveKind kind) {
    switch (kind) {
      case TpCollectiveKind::AllReduce:
        return OpKind::AllReduce;
      case TpCollectiveKind::AllGather:
        return OpKind::AllGather;
      case TpCollectiveKind::ReduceScatter:
        return OpKind::ReduceScatter;
    }
    return OpKind::AllReduce;
  }
  // ---- expert parallelism --------------------------------------------------------------------
  // DeepSpeed's MOELayer.forward (sharded_moe.py): the [experts, capacity, h] dispatch buffer goes
  // to the experts' ranks (_AllToAll over the EP group) and their outputs come back the same way;
  // _AllToAll.backward exchanges the gradients in reverse, so a backward has two as well, and a
  // recompute the forward's again. The layer's experts wait for the dispatch and the next layer
  // for the combine: the step's time is the compute and the two exchanges one after the other,
  // as here (the layer's compute, then its exchanges). Each is the whole buffer in the activation
  // dtype (nccl-tests' size: each rank sends 1/ep of it to each EP rank).
  void expert_exchanges(std::size_t layer, Phase phase, std::uint32_t compute) {
    const Layer& spec = model_.layers[layer];
    if (!spec.moe || !spec.moe->exchanges()) return;
    const auto& c = schedule_.context;
    const Elements elements = spec.moe->exchange_elements(c.micro_batch * c.seq_len);
    std::uint32_t previous = compute;
    for (int exchange = 0; exchange < 2; ++exchange) {
      previous = emit(Op{.kind = OpKind::AllToAll,
                         .stream = Stream::ExpertParallel,
                         .phase = phase,
                         .layer = int(layer),
                         .group_size = spec.moe->expert_parallel,
                         .group = ProcessGroup::Expert,
                         .link = Link::Network,
                         .bytes = elements * param_bytes_,
                         .wire_element_bytes = std::int32_t(param_bytes_)},
                      effects(), {previous});
      tp_wait_ = previous;
    }
  }

  // Sequence parallelism: the gradients of the replicated parameters each TP rank computed from its
  // part of the sequence, summed over the TP group once per step (Megatron's finalize_model_grads).
  std::uint32_t sequence_parallel_gradients(std::uint32_t before) {
    const auto& c = schedule_.context;
    if (!c.sequence_parallel) return before;
    Elements elements = 0;
    for (const auto& layer : model_.layers) {
      for (const auto& tensor : layer.params) {
        if (tensor.sequence_parallel_grad && tensor.trainable) elements += tensor.numel();
      }
    }
    if (elements == 0) return before;
    const Bytes element = grad_bytes_;
    return emit(Op{.kind = OpKind::AllReduce,
                   .stream = Stream::TensorParallel,
                   .phase = Phase::Reduce,
                   .group_size = c.tensor_parallel,
                   .group = ProcessGroup::Tensor,
                   .link = Link::Network,
                   .bytes = elements * element,
                   .wire_element_bytes = std::int32_t(element)},
                effects(),
                {before, schedule_.ops.empty() ? kNoOp : std::uint32_t(schedule_.ops.size() - 1)});
  }

  // The owner's gradients are complete at the backward of the lowest-indexed layer using them.
  bool layer_makes_grads_ready(std::size_t layer) const {
    const int owner = owner_of(layer);
    return int(layer) == owner && owner_trainable(owner) > 0;
  }

  // Stages 2-3 with contiguous_gradients: the gradient hook copies a gradient into the reduce
  // bucket and frees it, but only one that fits in a bucket; a larger one is reduced from where
  // autograd put it and lives until its reduction (stage_1_and_2.py extra_large_param_to_reduce,
  // stage3.py __add_grad_to_ipg_bucket).
  bool hook_copies_into_bucket(Elements numel) const {
    return zero_.contiguous_gradients && numel <= zero_.reduce_bucket_size;
  }

  // Elements of the owner's gradients its hook copies into the bucket (freed at its backward).
  Elements copied_at_hook(int owner) const {
    Elements copied = 0;
    for (auto t = params().layer_first_tensor[std::size_t(owner)];
         t < params().layer_first_tensor[std::size_t(owner) + 1]; ++t) {
      const Elements numel = params().tensor_numel[std::size_t(t)];
      if (params().tensor_trainable[std::size_t(t)] && hook_copies_into_bucket(numel))
        copied += numel;
    }
    return copied;
  }

  // Elements of the pending bucket's gradients still held where autograd put them (freed by the
  // bucket's reduction).
  Elements held_until_reduced() const {
    Elements held = 0;
    for (const auto t : pending_) {
      const Elements numel = params().tensor_numel[std::size_t(t)];
      if (!hook_copies_into_bucket(numel)) held += numel;
    }
    return held;
  }

  void add_gradient_allocation(Effects& fx, int owner) {
    // Frozen tensors get no gradient (DeepSpeed hooks only parameters that require grad).
    if (owner_trainable(owner) == 0) return;
    const Bytes bytes = owner_trainable(owner) * grad_bytes_;
    if (zero_.reduces_at_boundary()) {
      // Stages 0-1: full gradients, allocated at the first backward touching them, kept (and
      // accumulated) until the boundary.
      if (!grads_touched_[std::size_t(owner)]) fx.add(Device::Gpu, Component::GradsFull, bytes);
      grads_touched_[std::size_t(owner)] = true;
    } else if (!grads_touched_[std::size_t(owner)]) {
      // Stages 2-3: the autograd gradient exists until its hook copies it into a reduce bucket, or
      // until its bucket is reduced (hook_copies_into_bucket).
      fx.add(Device::Gpu, Component::UnreducedGrads, bytes);
      grads_touched_[std::size_t(owner)] = true;
    }
  }

  // ---- gradient buckets ----------------------------------------------------------------------
  void add_to_buckets(int owner, std::uint32_t producer) {
    const auto first = params().layer_first_tensor[std::size_t(owner)];
    const auto last = params().layer_first_tensor[std::size_t(owner) + 1];
    for (auto t = last; t-- > first;) {
      if (!params().tensor_trainable[std::size_t(t)]) continue;
      const Elements numel = params().tensor_numel[std::size_t(t)];
      // DeepSpeed reduces a full bucket from the hook of the gradient that does not fit, so the
      // reduction waits for the backward that produced that gradient.
      bucket_producer_ = producer;
      if (!pending_.empty() &&
          (bucket_.elements + numel > zero_.reduce_bucket_size || changes_group(t)))
        flush_bucket();
      pending_.push_back(t);
      bucket_.elements += numel;
    }
    grads_touched_[std::size_t(owner)] = false;  // the next micro-step allocates them anew
    if (fsdp_) flush_bucket();  // FSDP reduce-scatters each unit's gradients when its backward ends
  }

  // Expert parallelism: an expert's gradients are reduced over the ranks holding the same
  // experts, the others' over the data-parallel group; a bucket holds one kind (DeepSpeed reduces a
  // mixed bucket's slices over their own groups: stage_1_and_2.py average_tensor picks
  // expert_dp_process_group per parameter; the bytes per group are the same).
  bool is_expert(std::int32_t tensor) const {
    return params().expert_dp_size > 0 && params().tensor_expert[std::size_t(tensor)];
  }
  bool changes_group(std::int32_t tensor) const {
    return !pending_.empty() && is_expert(tensor) != is_expert(pending_.front());
  }
  // The ranks the pending bucket is reduced over, and which group they are.
  int bucket_ranks() const {
    return !pending_.empty() && is_expert(pending_.front()) ? params().expert_dp_size : dp();
  }
  ProcessGroup bucket_group() const {
    return !pending_.empty() && is_expert(pending_.front()) ? ProcessGroup::ExpertData
                                                            : ProcessGroup::Data;
  }

  // Elements of the bucket owned by rank 0: stages 1-2 own the flat range [0, flat_partition) of
  // the non-expert tensors and [0, expert_flat_partition) of the experts'; stage 3 owns one
  // partition of every tensor.
  Elements owned_in_bucket() const {
    Elements owned = 0;
    for (const auto t : pending_) {
      if (zero_.partitions_parameters()) {
        owned += params().tensor_partition[std::size_t(t)];
      } else {
        const Elements begin = flat_offset(t);
        const Elements end = begin + params().tensor_numel[std::size_t(t)];
        const Elements limit =
            is_expert(t) ? params().expert_flat_partition : params().flat_partition;
        owned += std::max<Elements>(0, std::min(end, limit) - begin);
      }
    }
    return owned;
  }

  // A tensor's offset in its flat space: the expert tensors' own (their param groups), or the
  // others'.
  Elements flat_offset(std::int32_t tensor) const {
    if (flat_offsets_.empty()) {
      flat_offsets_.resize(params().tensor_numel.size());
      // The flat buffers hold the trainable tensors (bit16_groups), experts in a group of their own.
      Elements offset = 0, expert_offset = 0;
      for (std::size_t t = 0; t < flat_offsets_.size(); ++t) {
        Elements& running = is_expert(std::int32_t(t)) ? expert_offset : offset;
        flat_offsets_[t] = running;
        if (params().tensor_trainable[t]) running += params().tensor_numel[t];
      }
    }
    return flat_offsets_[std::size_t(tensor)];
  }

  Elements bucket_message_elements() const {
    if (!zero_.partitions_parameters()) return bucket_.elements;
    Elements padded = 0;
    for (const auto t : pending_)
      padded += params().tensor_partition[std::size_t(t)] * params().group_size_of(std::size_t(t));
    return padded;
  }

  void flush_bucket() {
    if (pending_.empty()) return;
    if (fsdp_) return flush_fsdp_unit();
    const bool boundary_reduce = zero_.reduces_at_boundary();
    const Phase phase = boundary_reduce ? Phase::Reduce : Phase::Backward;
    const Elements owned = owned_in_bucket();
    const Bytes message = bucket_message_elements() * grad_bytes_;
    Effects fx = effects();
    const ZeroStage stage = zero_.zero_stage();
    if (!stage.partitions_optimizer_states() ||
        (stage.partitions_only_optimizer_states() && !zero_.contiguous_gradients)) {
      fx.add(Device::Gpu, Component::ReduceBucket, message);  // flattened copy for the collective
      fx.add(Device::Gpu, Component::ReduceBucket, -message);
    }
    if (stage.partitions_only_optimizer_states()) {
      // Stage 1 keeps the reduced gradients it owns and frees the others (the same bytes change
      // category, so the free comes first).
      fx.add(Device::Gpu, Component::GradsFull, -bucket_.elements * grad_bytes_);
      if (optimizer_device_ == Device::Gpu) add_grads_partition(fx, owned * grad_bytes_);
    } else if (stage.partitions_gradients_not_parameters() && optimizer_device_ == Device::Gpu &&
               grads_partition_bytes_ == 0) {
      // Stage 2 allocates the whole gradient partition at its first reduction.
      add_grads_partition(fx, params().owned * grad_bytes_);
    }
    if (stage.partitions_gradients()) {
      fx.add(Device::Gpu, Component::UnreducedGrads, -held_until_reduced() * grad_bytes_);
    }
    const bool scatter = stage.partitions_optimizer_states() &&
                         (zero_.reduce_scatter || stage.partitions_parameters());
    const auto reduce = schedule_.context.quantized_gradients
                            ? quantized_reduce(fx, phase)
                            : emit(Op{.kind = scatter ? OpKind::ReduceScatter : OpKind::AllReduce,
                                      .stream = Stream::Collective,
                                      .phase = phase,
                                      .bucket = std::int32_t(schedule_.buckets.size()),
                                      .group_size = bucket_ranks(),
                                      .group = bucket_group(),
                                      .link = Link::Network,
                                      .bytes = message,
                                      .wire_element_bytes = std::int32_t(grad_bytes_)},
                                   fx, {bucket_producer_});
    last_reduce_ = all_reduce_replicas(reduce, message, phase);
    if (!zero_.overlap() && !boundary_reduce) blocking_reduce_ = last_reduce_;
    if (stage.partitions_optimizer_states() && optimizer_device_ != Device::Gpu) {
      // ZeRO-Offload: the reduced low-precision gradient partition crosses PCIe to the host.
      // With the delayed update, the host's gradient partition is the previous step's until the
      // CPU step that reads it ends.
      last_d2h_ = emit(Op{.kind = OpKind::CopyD2H,
                          .stream = Stream::D2H,
                          .phase = phase,
                          .bucket = std::int32_t(schedule_.buckets.size()),
                          .link = Link::PcieD2H,
                          .bytes = owned * grad_bytes_},
                       effects(), {reduce, delayed_step_});
    }
    record_bucket();
  }

  // ZeRO++ qgZ (stage3.py __avg_scatter_grads -> all_to_all_quant_reduce): the bucket's
  // quantizable gradients in two all-to-all hops, within the node and then across nodes, the rest
  // reduce-scattered; one op per hop for the bucket (DeepSpeed issues a data and a scale exchange
  // per tensor). The bucket's memory effects go with its last op; the largest tensor's int4 and
  // dequantized buffers with the first.
  std::uint32_t quantized_reduce(const Effects& fx, Phase phase) {
    const int world = dp();
    const int per_node = schedule_.context.data_parallel_ranks_per_node();
    Bytes node_hop = 0, cross_hop = 0, transient = 0;
    Elements scattered = 0;
    for (const auto t : pending_) {
      const QgzTensor q = qgz_tensor(tensor_spec(t).shape, world, per_node);
      if (!q.quantized) scattered += params().tensor_partition[std::size_t(t)] * world;
      node_hop += q.node_hop;
      cross_hop += q.cross_node_hop;
      transient = std::max(transient, q.transient);
    }
    const bool crosses = node_hop > 0 && world > per_node;
    std::uint32_t last = bucket_producer_;
    const auto hop = [&](OpKind kind, ProcessGroup group, int size, Bytes bytes, Bytes wire,
                         Bytes buffers, bool final) {
      Effects e = effects();
      e.add(Device::Gpu, Component::ReduceBucket, buffers);
      e.add(Device::Gpu, Component::ReduceBucket, -buffers);
      if (final) {
        for (const MemEffect& item : fx.items()) e.add(item.device, item.component, item.bytes);
      }
      last = emit(Op{.kind = kind,
                     .stream = Stream::Collective,
                     .phase = phase,
                     .bucket = std::int32_t(schedule_.buckets.size()),
                     .group_size = size,
                     .group = group,
                     .link = Link::Network,
                     .bytes = bytes,
                     .wire_element_bytes = std::int32_t(wire)},
                  e, {last});
    };
    if (node_hop > 0)
      hop(OpKind::AllToAll, ProcessGroup::NodeLocal, per_node, node_hop, 1, transient,
          !crosses && scattered == 0);
    if (crosses)
      hop(OpKind::AllToAll, ProcessGroup::CrossNode, world / per_node, cross_hop, 1, 0,
          scattered == 0);
    if (scattered > 0 || node_hop == 0)
      hop(OpKind::ReduceScatter, ProcessGroup::Data, world, scattered * grad_bytes_, grad_bytes_, 0,
          true);
    return last;
  }

  const TensorSpec& tensor_spec(std::int32_t tensor) const {
    const auto layer = std::size_t(params().tensor_layer[std::size_t(tensor)]);
    const auto first = params().layer_first_tensor[layer];
    return model_.layers[layer].params[std::size_t(tensor - first)];
  }

  // FSDP's post-backward (foreach_reduce): the previous unit's reduce-scatter input is freed (FSDP2
  // keeps it until the next reduce-scatter instead of recording streams), the unit's unsharded
  // gradients are copied into a new input buffer in reduce_dtype and freed, and the reduced shard
  // is accumulated into the sharded gradient, allocated at the unit's first reduction (fp32, the
  // sharded parameters' dtype).
  void flush_fsdp_unit() {
    Effects fx = effects();
    fx.add(Device::Gpu, Component::ReduceBucket, -reduce_scatter_input_bytes_);
    reduce_scatter_input_bytes_ = bucket_message_elements() * reduce_bytes_;
    fx.add(Device::Gpu, Component::ReduceBucket, reduce_scatter_input_bytes_);
    fx.add(Device::Gpu, Component::UnreducedGrads, -held_until_reduced() * grad_bytes_);
    if (micro_ == 0 && optimizer_device_ == Device::Gpu)
      add_grads_partition(fx, owned_in_bucket() * 4);
    const auto reduce = emit(Op{.kind = OpKind::ReduceScatter,
                                .stream = Stream::Collective,
                                .phase = Phase::Backward,
                                .bucket = std::int32_t(schedule_.buckets.size()),
                                .group_size = dp(),
                                .link = Link::Network,
                                .bytes = reduce_scatter_input_bytes_,
                                .wire_element_bytes = std::int32_t(reduce_bytes_)},
                             fx, {bucket_producer_});
    last_reduce_ = all_reduce_replicas(reduce, reduce_scatter_input_bytes_, Phase::Backward);
    if (optimizer_device_ != Device::Gpu) {
      // CPUOffloadPolicy: the reduced shard is copied to the sharded gradient on the host.
      last_d2h_ = emit(Op{.kind = OpKind::CopyD2H,
                          .stream = Stream::D2H,
                          .phase = Phase::Backward,
                          .bucket = std::int32_t(schedule_.buckets.size()),
                          .link = Link::PcieD2H,
                          .bytes = owned_in_bucket() * 4},
                       effects(), {reduce});
    }
    record_bucket();
  }

  // Hybrid sharding: the shard group's reduced partition of a `message`-byte reduction is summed
  // with its copies in the other shard groups. FSDP's HSDP all-reduces every reduce-scatter's
  // output over the replicate group (foreach_reduce); DeepSpeed's MiCS all-reduces the gradient
  // partitions across replication groups at the accumulation boundary (mics.py
  // allreduce_mics_shard_grads).
  std::uint32_t all_reduce_replicas(std::uint32_t reduce, Bytes message, Phase phase) {
    const auto& c = schedule_.context;
    if (c.replicas() <= 1) return reduce;
    if (!fsdp_ && micro_ + 1 < c.grad_accumulation) return reduce;
    return emit(Op{.kind = OpKind::AllReduce,
                   .stream = Stream::Collective,
                   .phase = phase,
                   .bucket = std::int32_t(schedule_.buckets.size()),
                   .group_size = c.replicas(),
                   .group = ProcessGroup::Replicate,
                   .link = Link::Network,
                   .bytes = message / dp(),
                   .wire_element_bytes = std::int32_t(fsdp_ ? reduce_bytes_ : grad_bytes_)},
                effects(), {reduce});
  }

  void record_bucket() {
    bucket_.tensors_begin = std::uint32_t(schedule_.bucket_tensors.size());
    bucket_.tensors_count = std::uint32_t(pending_.size());
    schedule_.bucket_tensors.insert(schedule_.bucket_tensors.end(), pending_.begin(), pending_.end());
    schedule_.buckets.push_back(bucket_);
    bucket_ = Bucket{};
    pending_.clear();
  }

  void add_grads_partition(Effects& fx, Bytes bytes) {
    fx.add(Device::Gpu, Component::GradsPartition, bytes);
    grads_partition_bytes_ += bytes;
  }

  // Stages 0-1 reduce all gradients once, at the gradient-accumulation boundary.
  void reduce_at_boundary() {
    const auto& tensors = params().tensor_numel;
    // The reduction starts after the last backward of the last micro-step.
    bucket_producer_ = schedule_.ops.empty() ? kNoOp : std::uint32_t(schedule_.ops.size() - 1);
    for (std::size_t t = tensors.size(); t-- > 0;) {
      if (!params().tensor_trainable[t]) continue;
      const Elements numel = tensors[t];
      if (!pending_.empty() &&
          (bucket_.elements + numel > zero_.reduce_bucket_size || changes_group(std::int32_t(t))))
        flush_bucket();
      pending_.push_back(std::int32_t(t));
      bucket_.elements += numel;
    }
    flush_bucket();
  }

  // ---- ColossalAI: ZeroHook's gathers (sim/schedule/colossalai.hpp) ------------------------
  const ColossalAiConfig& colossal() const { return config_.colossalai; }
  std::vector<ColossalGather> colossal_gathers(int owner) const {
    return colossalai_gathers(model_, params(), std::size_t(owner), colossal().shard_strategy,
                              dp());
  }
  // The device of each parameter shard now: the GPU unless placement "cpu" (or Gemini, or
  // reuse_fp16_shard's gradient) put it on the host.
  Device shard_device(std::int32_t tensor) const {
    return shard_on_host_[std::size_t(tensor)] ? Device::Cpu : Device::Gpu;
  }
  Bytes shard_bytes(std::int32_t tensor) const {
    return params().tensor_partition[std::size_t(tensor)] * param_bytes_;
  }

  // StatefulTensorMgr.adjust_layout moves a module's shards in COMPUTE state to the GPU, and the
  // "cpu" policy evicts every held shard at the next adjustment: one copy each way per use (the
  // layer's shards together here). The moves are synchronous `.to(device)` calls in the hooks:
  // they wait for the compute before them, and the gathers (then the compute) wait for them.
  std::uint32_t move_shards(int owner, Phase phase, bool to_gpu) {
    Bytes moved = 0;
    Effects fx = effects();
    const auto first = params().layer_first_tensor[std::size_t(owner)];
    const auto end = params().layer_first_tensor[std::size_t(owner) + 1];
    for (auto t = first; t < end; ++t) {
      if (shard_on_host_[std::size_t(t)] != to_gpu) continue;
      moved += shard_bytes(t);
      shard_on_host_[std::size_t(t)] = !to_gpu;
    }
    if (moved == 0) return kNoOp;
    fx.add(to_gpu ? Device::Cpu : Device::Gpu, Component::ParamsPartition, -moved);
    fx.add(to_gpu ? Device::Gpu : Device::Cpu, Component::ParamsPartition, moved);
    return shard_op_[std::size_t(owner)] =
               emit(Op{.kind = to_gpu ? OpKind::CopyH2D : OpKind::CopyD2H,
                       .stream = to_gpu ? Stream::H2D : Stream::D2H,
                       .phase = phase,
                       .layer = owner,
                       .link = to_gpu ? Link::PcieH2D : Link::PcieD2H,
                       .bytes = moved},
                    fx, {shard_op_[std::size_t(owner)], last_compute_});
  }

  // Gemini (placement "auto"; sim/schedule/gemini.hpp): before a layer's shards come to the GPU,
  // the shards the steady step's policy evicts go to the host. Each use is recorded for the
  // simulation: the layer, its tensors, and where its sampling period begins.
  void gemini_adjust(int owner, Phase phase) {
    const std::size_t use = gemini_uses_.size();
    GeminiUse record{.layer = owner};
    for (auto t = params().layer_first_tensor[std::size_t(owner)];
         t < params().layer_first_tensor[std::size_t(owner) + 1]; ++t)
      record.tensors.push_back(t);
    gemini_uses_.push_back(std::move(record));
    gemini_period_.push_back(schedule_.ops.size());
    gemini_micro_.push_back(micro_);
    if (!gemini_ || use >= gemini_->evict.size()) return;
    // One copy per run of consecutive shards of one layer (the op names them).
    std::vector<std::int32_t> leaving = gemini_->evict[use];
    std::sort(leaving.begin(), leaving.end());
    for (std::size_t i = 0; i < leaving.size();) {
      const std::int32_t first = leaving[i];
      const std::int32_t layer = params().tensor_layer[std::size_t(first)];
      Bytes moved = 0;
      std::int32_t count = 0;
      for (; i < leaving.size() && leaving[i] == first + count &&
             params().tensor_layer[std::size_t(leaving[i])] == layer;
           ++i, ++count) {
        moved += shard_bytes(leaving[i]);
        shard_on_host_[std::size_t(leaving[i])] = true;
      }
      Effects fx = effects();
      fx.add(Device::Gpu, Component::ParamsPartition, -moved);
      fx.add(Device::Cpu, Component::ParamsPartition, moved);
      shard_op_[std::size_t(layer)] = emit(Op{.kind = OpKind::CopyD2H,
                                              .stream = Stream::D2H,
                                              .phase = phase,
                                              .layer = layer,
                                              .link = Link::PcieD2H,
                                              .bytes = moved,
                                              .first_tensor = first,
                                              .tensor_count = count},
                                           fx, {shard_op_[std::size_t(layer)], last_compute_});
    }
  }

  // Each gather replaces its shards by the gathered tensors (payload_reset frees them); the bucket
  // strategy's N buffers live until it returns.
  std::uint32_t gather_colossalai(int owner, Phase phase) {
    if (colossal().placement == PlacementPolicy::Auto) gemini_adjust(owner, phase);
    std::uint32_t last = move_shards(owner, phase, true);
    if (colossal().placement == PlacementPolicy::Auto)
      gemini_sample_.push_back(schedule_.ops.size());
    for (const ColossalGather& g : colossal_gathers(owner)) {
      Bytes shards = 0;
      for (auto t = g.first_tensor; t < g.first_tensor + g.tensor_count; ++t)
        shards += shard_bytes(t);
      Effects fx = effects();
      fx.add(Device::Gpu, Component::GatheredParams, g.transient * param_bytes_);
      fx.add(Device::Gpu, Component::GatheredParams, g.gathered * param_bytes_);
      fx.add(Device::Gpu, Component::ParamsPartition, -shards);
      fx.add(Device::Gpu, Component::GatheredParams, -g.transient * param_bytes_);
      last = emit(Op{.kind = OpKind::AllGather,
                     .stream = Stream::Collective,
                     .phase = phase,
                     .layer = owner,
                     .group_size = dp(),
                     .link = Link::Network,
                     .bytes = g.gathered * param_bytes_,
                     .wire_element_bytes = std::int32_t(param_bytes_),
                     .first_tensor = g.first_tensor,
                     .tensor_count = g.tensor_count},
                  fx, {last});
    }
    live_[std::size_t(owner)] = true;
    live_elements_ += gathered_elements(owner);
    gather_op_[std::size_t(owner)] = last;
    return last;
  }

  // The post hooks shard the gathered tensors again: get_shard makes new shards, payload_reset
  // frees the gathered ones; placement "cpu" then evicts the shards.
  void release_colossalai(int owner, Phase phase) {
    Effects fx = effects();
    fx.add(Device::Gpu, Component::ParamsPartition, owner_partition_elements(owner) * param_bytes_);
    fx.add(Device::Gpu, Component::GatheredParams, -gathered_elements(owner) * param_bytes_);
    shard_op_[std::size_t(owner)] =
        emit(Op{.kind = OpKind::Release, .stream = Stream::Compute, .phase = phase, .layer = owner},
             fx, {});
    live_[std::size_t(owner)] = false;
    live_elements_ -= gathered_elements(owner);
    if (colossal().placement == PlacementPolicy::Cpu) move_shards(owner, phase, false);
  }

  // ---- ColossalAI: gradient hooks and the ReduceScatterBucketer -----------------------------
  Bytes colossal_bucket_bytes() const { return Elements(dp() + 1) * bucket_row_ * grad_bytes_; }
  Device grads_device() const { return optimizer_device_; }
  Bytes saved_grad_bytes_per_element() const { return colossal().reuse_fp16_shard ? 2 : 4; }

  // _grad_post_backward_hook clones each gradient, chunk_and_pad pads it, and the bucketer stacks
  // it into its bucket (allocated at the first append) or, for a chunk larger than a row,
  // concatenates it and makes the output of a reduce-scatter of its own. The hooks run one after
  // another: the largest one's temporaries are the layer's peak; autograd's gradients go with them.
  void add_colossalai_hooks(Effects& fx, int owner) {
    Bytes peak = 0;
    bool bucketed = false;
    const auto first = params().layer_first_tensor[std::size_t(owner)];
    const auto end = params().layer_first_tensor[std::size_t(owner) + 1];
    for (auto t = first; t < end; ++t) {
      const Elements numel = params().tensor_numel[std::size_t(t)];
      const ColossalChunks c = colossalai_chunks(numel, dp(), bucket_row_);
      const Elements made = numel + c.padding_made + dp() * c.chunk + (c.direct ? c.chunk : 0);
      peak = std::max(peak, made * grad_bytes_);
      bucketed = bucketed || !c.direct;
    }
    if (bucketed && !colossal_bucket_allocated_) {
      fx.add(Device::Gpu, Component::ReduceBucket, colossal_bucket_bytes());
      colossal_bucket_allocated_ = true;
    }
    fx.add(Device::Gpu, Component::UnreducedGrads, peak);
    fx.add(Device::Gpu, Component::UnreducedGrads, -peak);
    fx.add(Device::Gpu, Component::UnreducedGrads, -owner_numel(owner) * grad_bytes_);
  }

  void reduce_colossalai(int owner, std::uint32_t producer) {
    const auto first = params().layer_first_tensor[std::size_t(owner)];
    const auto last = params().layer_first_tensor[std::size_t(owner) + 1];
    for (auto t = last; t-- > first;) {
      const ColossalChunks c =
          colossalai_chunks(params().tensor_numel[std::size_t(t)], dp(), bucket_row_);
      if (c.direct) {
        const std::vector<std::int32_t> held = std::exchange(pending_, {t});
        const Elements held_chunks = std::exchange(colossal_pending_chunks_, c.chunk);
        const Elements held_numel =
            std::exchange(bucket_.elements, params().tensor_numel[std::size_t(t)]);
        emit_colossalai_reduce(producer);
        pending_ = held;
        colossal_pending_chunks_ = held_chunks;
        bucket_.elements = held_numel;
        continue;
      }
      if (!pending_.empty() && colossal_pending_chunks_ + c.chunk > bucket_row_)
        emit_colossalai_reduce(producer);
      pending_.push_back(t);
      colossal_pending_chunks_ += c.chunk;
      bucket_.elements += params().tensor_numel[std::size_t(t)];
    }
    grads_touched_[std::size_t(owner)] = false;
  }

  // A reduce-scatter of the pending chunks, then each gradient's _save_grad: moved to the host
  // unless placement is "cuda" (a copy of the fp16 shard), cast to fp32 there, or with
  // reuse_fp16_shard kept in fp16 in place of the parameter shard. Later micro-steps add into the
  // saved gradient.
  void emit_colossalai_reduce(std::uint32_t producer) {
    if (pending_.empty()) return;
    const Elements chunks = colossal_pending_chunks_;
    Effects saved = effects();
    if (micro_ == 0) {
      saved.add(grads_device(), Component::GradsPartition, chunks * saved_grad_bytes_per_element());
      if (colossal().reuse_fp16_shard) {
        std::array<Bytes, kDeviceCount> freed{};
        for (const auto t : pending_) {
          freed[std::size_t(shard_device(t))] += shard_bytes(t);
          shard_on_host_[std::size_t(t)] = grads_device() == Device::Cpu;  // where it returns
        }
        for (int d = 0; d < kDeviceCount; ++d)
          saved.add(Device(d), Component::ParamsPartition, -freed[std::size_t(d)]);
      }
      colossal_saved_grad_bytes_ += chunks * saved_grad_bytes_per_element();
    }
    const bool to_host = grads_device() != Device::Gpu;
    const auto reduce = emit(Op{.kind = OpKind::ReduceScatter,
                                .stream = Stream::Collective,
                                .phase = Phase::Backward,
                                .bucket = std::int32_t(schedule_.buckets.size()),
                                .group_size = dp(),
                                .link = Link::Network,
                                .bytes = dp() * chunks * grad_bytes_,
                                .wire_element_bytes = std::int32_t(grad_bytes_)},
                             to_host ? effects() : saved, {producer});
    last_reduce_ = reduce;
    if (to_host) {
      last_d2h_ = emit(Op{.kind = OpKind::CopyD2H,
                          .stream = Stream::D2H,
                          .phase = Phase::Backward,
                          .bucket = std::int32_t(schedule_.buckets.size()),
                          .link = Link::PcieD2H,
                          .bytes = chunks * grad_bytes_},
                       saved, {reduce});
    }
    colossal_pending_chunks_ = 0;
    record_bucket();
  }

  // _post_backward_operations: the bucket is flushed and its buffers freed (reducer.free()).
  void end_colossalai_backward() {
    if (micro_ == 0) gemini_backward_end_ = schedule_.ops.size();
    emit_colossalai_reduce(last_reduce_producer());
    if (!colossal_bucket_allocated_) return;
    Effects fx = effects();
    fx.add(Device::Gpu, Component::ReduceBucket, -colossal_bucket_bytes());
    colossal_bucket_allocated_ = false;
    emit(Op{.kind = OpKind::Release, .stream = Stream::Compute, .phase = Phase::Backward}, fx,
         {last_reduce_});
  }
  std::uint32_t last_reduce_producer() const {
    return schedule_.ops.empty() ? kNoOp : std::uint32_t(schedule_.ops.size() - 1);
  }

  // ShardedOptimizerV2.step (sharded_optim_v2.py): the overflow flag all-reduced; HybridAdam on the
  // fp32 master shards where they live (colossal_C's fused Adam on the GPU, CPU Adam on the host);
  // _copy_master_model_to_model_fp16 casts each updated shard to fp16 (one tensor at a time) and
  // copies it into the parameter shard wherever that is, frees the saved gradient, or with
  // reuse_fp16_shard hands its storage back to the parameter.
  void colossalai_optimizer_step() {
    std::uint32_t before = last_d2h_ != kNoOp ? last_d2h_ : last_reduce_;
    before = emit(Op{.kind = OpKind::OverflowCheck,
                     .stream = Stream::Collective,
                     .phase = Phase::Optimizer,
                     .group_size = dp(),
                     .link = Link::Network,
                     .bytes = 4},
                  effects(), {before});
    if (config_.gradient_clipping > 0) {  // the engine's clip_grad_norm
      before = emit(Op{.kind = OpKind::GradNorm,
                       .stream = Stream::Collective,
                       .phase = Phase::Optimizer,
                       .group_size = dp(),
                       .link = Link::Network,
                       .bytes = 4},
                    effects(), {before});
    }
    const ParamLayout& p = params();
    Effects fx = effects();
    Elements largest = 0;
    for (const auto part : p.tensor_partition) largest = std::max(largest, part);
    // p.half() of one master shard at a time, made by the step
    fx.add(optimizer_device_, Component::OptimizerTemporaries, largest * param_bytes_);
    fx.add(optimizer_device_, Component::OptimizerTemporaries, -largest * param_bytes_);
    fx.add(grads_device(), Component::GradsPartition, -colossal_saved_grad_bytes_);
    Bytes to_gpu = 0, returned = 0;
    for (std::size_t t = 0; t < p.tensor_partition.size(); ++t) {
      if (colossal().reuse_fp16_shard) {
        returned += shard_bytes(std::int32_t(t));
      } else if (!shard_on_host_[t] && optimizer_device_ == Device::Cpu) {
        to_gpu += shard_bytes(std::int32_t(t));
      }
    }
    fx.add(grads_device(), Component::ParamsPartition, returned);
    colossal_saved_grad_bytes_ = 0;
    const bool host = optimizer_device_ != Device::Gpu;
    const auto step = emit(
        Op{.kind = OpKind::OptimizerStep,
           .stream = host ? Stream::Cpu : Stream::Compute,
           .phase = Phase::Optimizer,
           .flops = double(p.owned) * optimizer_flops_per_element(),
           .memory_bytes_touched = p.owned * (saved_grad_bytes_per_element() +
                                              2 * (master_bytes_ + state_bytes_) + param_bytes_)},
        fx, {before});
    if (to_gpu > 0) {
      emit(Op{.kind = OpKind::CopyH2D,
              .stream = Stream::H2D,
              .phase = Phase::Optimizer,
              .link = Link::PcieH2D,
              .bytes = to_gpu},
           effects(), {step});
    }
    emit(Op{.kind = OpKind::LossScaleUpdate, .stream = Stream::Compute, .phase = Phase::Optimizer},
         effects(), {});
  }

  // ---- ZeRO-Offload's delayed parameter update (Ren et al. 2021, section 5.2) ---------------
  // The step starts with the CPU update of the previous step's gradients (their overflow check and
  // norm first, as the DPU fork's step_with_param_delay does). The forward and backward run on the
  // parameters written back a step earlier, one step stale; this step's gradients cross to the host
  // once that update has read the previous ones (flush_bucket); the updated parameters cross to the
  // GPU once this step's backward no longer reads them, for the next step (finish_delayed_update).
  void delayed_host_optimizer() {
    std::uint32_t before = kNoOp;
    if (config_.precision.precision == Precision::Fp16) {
      before = emit(Op{.kind = OpKind::OverflowCheck,
                       .stream = Stream::Collective,
                       .phase = Phase::Optimizer,
                       .group_size = dp(),
                       .link = Link::Network,
                       .bytes = 1},
                    effects(), {});
    }
    before = emit(Op{.kind = OpKind::GradNorm,
                     .stream = Stream::Collective,
                     .phase = Phase::Optimizer,
                     .group_size = dp(),
                     .link = Link::Network,
                     .bytes = 4},
                  effects(), {before});
    const Elements owned = params().owned;
    delayed_step_ = emit(
        Op{.kind = OpKind::OptimizerStep,
           .stream = Stream::Cpu,
           .phase = Phase::Optimizer,
           .flops = double(owned) * optimizer_flops_per_element(),
           .memory_bytes_touched = owned * (4 + 2 * (master_bytes_ + state_bytes_) + param_bytes_),
           .delayed = true},
        effects(), {before});
  }

  void finish_delayed_update() {
    Effects fx = effects();
    free_step_gradients(fx);
    const auto written = emit(Op{.kind = OpKind::CopyH2D,
                                 .stream = Stream::H2D,
                                 .phase = Phase::Optimizer,
                                 .link = Link::PcieH2D,
                                 .bytes = params().owned * param_bytes_},
                              fx, {delayed_step_, last_backward_});
    allgather_updated_params(written);
    if (config_.precision.precision == Precision::Fp16 && config_.precision.loss_scale.dynamic()) {
      emit(
          Op{.kind = OpKind::LossScaleUpdate, .stream = Stream::Compute, .phase = Phase::Optimizer},
          effects(), {});
    }
  }

  // ---- optimizer ---------------------------------------------------------------------------
  void optimizer_step() {
    if (colossalai_) return colossalai_optimizer_step();
    if (delayed_update_) return finish_delayed_update();
    std::uint32_t before = sequence_parallel_gradients(last_reduce_);
    const bool fp16 = config_.precision.precision == Precision::Fp16;
    if (fp16 && zero_.partitions_optimizer_states()) {
      before = emit(Op{.kind = OpKind::OverflowCheck, .stream = Stream::Collective, .phase = Phase::Optimizer,
                       .group_size = dp(), .link = Link::Network, .bytes = 1},
                    effects(), {before});
    }
    if (fp16) before = model_parallel_scalar(OpKind::OverflowCheck, 1, before);
    if (zero_.partitions_optimizer_states()) {
      before = emit(Op{.kind = OpKind::GradNorm, .stream = Stream::Collective, .phase = Phase::Optimizer,
                       .group_size = dp(), .link = Link::Network, .bytes = 4},
                    effects(), {before});
    }
    if (zero_.partitions_optimizer_states() && params().expert_dp_size > 1) {
      // stage_1_and_2.py _average_expert_grad_norms: the expert group's norm all-reduced over
      // the ranks that hold the same experts.
      before = emit(Op{.kind = OpKind::GradNorm,
                       .stream = Stream::Collective,
                       .phase = Phase::Optimizer,
                       .group_size = params().expert_dp_size,
                       .group = ProcessGroup::ExpertData,
                       .link = Link::Network,
                       .bytes = 4},
                    effects(), {before});
    }
    before = model_parallel_scalar(OpKind::GradNorm, 4, before);
    const std::uint32_t updated = optimizer_device_ == Device::Gpu ? gpu_optimizer(before)
                                                                   : host_optimizer(before);
    if (zero_.zero_stage().uses_flat_partition()) allgather_updated_params(updated);
    if (zero_.partitions_parameters() && params().persistent > 0)
      allgather_persistent_params(updated);
    if (config_.precision.precision == Precision::Fp16 && config_.precision.loss_scale.dynamic()) {
      emit(Op{.kind = OpKind::LossScaleUpdate, .stream = Stream::Compute, .phase = Phase::Optimizer},
           effects(), {});
    }
  }

  // Under tensor parallelism the ranks of a TP group hold different parts of the model, so the
  // fp16 overflow flag (1 byte, MAX) and the gradient norm's sum of squares (fp32) are all-reduced
  // over the group too, after the data-parallel group: DeepSpeed's _model_parallel_all_reduce in
  // has_overflow and get_grad_norm_direct (stage_1_and_2.py, stage3.py), its FP16/BF16 optimizers'
  // global norm at stage 0.
  // With pipeline stages the model-parallel group spans them too (DeepSpeed's pipeline grid: its
  // model-parallel group is the pipe x model slice): the TP group's sum is summed again over the
  // stages of this rank's TP and DP coordinates (peer_stage -1: every stage).
  std::uint32_t model_parallel_scalar(OpKind kind, Bytes bytes, std::uint32_t before) {
    const auto& c = schedule_.context;
    if (c.tensor_parallel > 1) {
      before = emit(Op{.kind = kind,
                       .stream = Stream::TensorParallel,
                       .phase = Phase::Optimizer,
                       .group_size = c.tensor_parallel,
                       .group = ProcessGroup::Tensor,
                       .link = Link::Network,
                       .bytes = bytes},
                    effects(), {before});
    }
    if (c.pipeline_parallel > 1) {
      before = emit(Op{.kind = kind,
                       .stream = Stream::Pipeline,
                       .phase = Phase::Optimizer,
                       .group_size = c.pipeline_parallel,
                       .group = ProcessGroup::Pipeline,
                       .peer_stage = -1,
                       .link = Link::Network,
                       .bytes = bytes},
                    effects(), {before});
    }
    return before;
  }

  // Frees what the step no longer needs after the update: full gradients (stage 0, set_to_none),
  // the gradient partition (stages 1-2) and the reduce buffers (stages 1-2).
  void free_step_gradients(Effects& fx) {
    if (!zero_.partitions_optimizer_states()) {
      fx.add(Device::Gpu, Component::GradsFull, -params().trainable * grad_bytes_);
    }
    fx.add(Device::Gpu, Component::GradsPartition, -grads_partition_bytes_);
    grads_partition_bytes_ = 0;
    fx.add(Device::Gpu, Component::ReduceBucket, -reduce_scatter_input_bytes_);
    reduce_scatter_input_bytes_ = 0;
    if (zero_.zero_stage().uses_flat_partition() && !pending_ipg_alloc_)
      fx.add(Device::Gpu, Component::ReduceBucket, -ipg_bytes_);
    // _post_step's invalidate_secondary_tensor
    fx.add(Device::Gpu, Component::ParamsSecondary, -secondary_partition_bytes(true));
    std::fill(secondary_.begin(), secondary_.end(), false);
  }

  std::uint32_t gpu_optimizer(std::uint32_t before) {
    const ParamLayout& p = params();
    Effects fx = effects();
    // DeepSpeed's optimizer step converts the gradient partition to fp32 (FSDP's is fp32
    // already): stages 1-2 the whole partition (stage_1_and_2.py step), stage 3 one sub-group at a
    // time, freeing each after its update (stage3.py _prepare_fp32_grad_for_sub_group,
    // _release_sub_group).
    const Elements stepped = fsdp_ ? p.owned : fp32_gradient_elements();
    const Bytes cast = fp32_gradient_copy_bytes(stepped);
    // The ZeRO optimizer first flattens the gradient pieces into one new tensor in their dtype
    // (self.flatten(self.averaged_gradients[i]).to(fp32), both files): a 16-bit flat copy lives
    // beside the fp32 one until the statement ends; fp32 gradients are flattened into the copy.
    const Bytes flat = cast > 0 && grad_bytes_ < 4 && zero_.partitions_optimizer_states()
                           ? stepped * grad_bytes_
                           : 0;
    fx.add(Device::Gpu, Component::Fp32GradCast, flat);
    fx.add(Device::Gpu, Component::Fp32GradCast, cast);
    fx.add(Device::Gpu, Component::Fp32GradCast, -flat);
    const Bytes temporaries = optimizer_temporary_bytes(stepped);
    fx.add(Device::Gpu, Component::OptimizerTemporaries, temporaries);
    fx.add(Device::Gpu, Component::OptimizerTemporaries, -temporaries);
    fx.add(Device::Gpu, Component::Fp32GradCast, -cast);
    free_step_gradients(fx);
    const Bytes touched = p.owned * (4 + 2 * (master_bytes_ + state_bytes_) + param_bytes_);
    return emit(Op{.kind = OpKind::OptimizerStep, .stream = Stream::Compute, .phase = Phase::Optimizer,
                   .flops = double(p.owned) * optimizer_flops_per_element(), .memory_bytes_touched = touched},
                fx, {before});
  }

  // FSDP shards every parameter tensor evenly: this rank's share of the largest.
  Elements largest_shard_elements() const {
    Elements largest = 0;
    for (const Layer& layer : model_.layers) {
      for (const TensorSpec& tensor : layer.params) largest = std::max(largest, tensor.numel());
    }
    return ceil_div(largest, Elements(dp()));
  }

  // The fp32 tensors torch.optim's Adam builds in one step() over `stepped` elements, freed when
  // it returns. DeepSpeed steps one flat tensor (a partition, or a stage-3 sub-group) at a time;
  // FSDP all its shards in one call, one tensor per parameter.
  // - foreach (_multi_tensor_adam[w]): sqrt(exp_avg_sq) of every stepped tensor (_foreach_sqrt),
  //   divided and shifted in place (PyTorch >= 2.0);
  // - for-loop (_single_tensor_adam[w]): exp_avg_sq.sqrt() and its quotient by
  //   bias_correction2_sqrt, both alive at the division, for the largest tensor.
  Bytes optimizer_temporary_bytes(Elements stepped) const {
    if (config_.optimizer.type == OptimizerType::Sgd) return 0;
    switch (config_.effective_optimizer_kernel()) {
      case OptimizerKernel::Fused:
        return 0;
      case OptimizerKernel::Foreach:
        return stepped * 4;
      case OptimizerKernel::ForLoop:
        return 2 * 4 * (fsdp_ ? largest_shard_elements() : stepped);
    }
    return 0;
  }

  // The fp32 gradient DeepSpeed's optimizer steps on: the cast of 16-bit gradients (stage 0 and
  // ZeRO), or with fp32 gradients the ZeRO optimizer's flattened copy of its partition (stage 0
  // steps fp32 parameters on their own gradients). FSDP's sharded gradients are fp32 already.
  Bytes fp32_gradient_copy_bytes(Elements stepped) const {
    if (fsdp_) return 0;
    const bool copies = config_.precision.mixed() || zero_.partitions_optimizer_states();
    return copies ? stepped * 4 : 0;
  }

  // Elements of the fp32 gradient copy DeepSpeed's optimizer holds at once: the partition (stages
  // 1-2), the largest sub-group (stage 3).
  Elements fp32_gradient_elements() const {
    const Elements owned = params().owned;
    return zero_.partitions_parameters()
               ? std::min(owned, params().sub_group_elements(zero_.sub_group_size))
               : owned;
  }

  double optimizer_flops_per_element() const {
    switch (config_.optimizer.type) {
      case OptimizerType::Adam:
      case OptimizerType::AdamW: return 12;
      case OptimizerType::Sgd: return config_.optimizer.momentum > 0 ? 4 : 2;
    }
    return 12;
  }

  // CPU Adam on the host partition (ZeRO-Offload).
  std::uint32_t host_optimizer(std::uint32_t before) {
    const ParamLayout& p = params();
    const std::uint32_t after = last_d2h_ != kNoOp ? last_d2h_ : before;
    if (optimizer_device_ == Device::Nvme) {
      const std::uint32_t swapped = swapped_host_optimizer(after, before);
      return param_device_ == Device::Nvme ? swapped : write_back_params(swapped);
    }
    if (p.owned == 0) return write_back_params(after);  // nothing owned: no update
    return write_back_params(host_optimizer_step(0, p.owned, true, {after, before}));
  }

  std::uint32_t host_optimizer_step(std::int32_t group, Elements chunk, bool last_group,
                                    std::initializer_list<std::uint32_t> deps) {
    Effects fx = effects();
    if (last_group) free_step_gradients(fx);
    return emit(Op{.kind = OpKind::OptimizerStep, .stream = Stream::Cpu, .phase = Phase::Optimizer,
                   .sub_group = group, .flops = double(chunk) * optimizer_flops_per_element(),
                   .memory_bytes_touched = chunk * (4 + 2 * (master_bytes_ + state_bytes_) + param_bytes_)},
                fx, deps);
  }

  // ZeRO-Infinity: each sub-group's master and states are read, updated and written back through
  // one of the swap buffer sets (optimizer_swap_buffer_sets): a read waits for the write that frees
  // its set; with pipeline_read the next sub-group is read before this one is updated; without
  // pipeline_write the next update waits for this sub-group's write (a synchronous swap-out).
  std::uint32_t swapped_host_optimizer(std::uint32_t after, std::uint32_t before) {
    const Elements owned = params().owned;
    const Elements size = params().sub_group_elements(zero_.sub_group_size);
    const auto groups = std::size_t(ceil_div(owned, size));
    const int states = int(state_bytes_ / 4);
    const auto sets = std::size_t(optimizer_swap_buffer_sets(zero_.offload_optimizer, states));
    const bool read_ahead = optimizer_swap_reads_ahead(zero_.offload_optimizer, states);
    const auto chunk_of = [&](std::size_t g) { return std::min(size, owned - Elements(g) * size); };
    const auto state_of = [&](std::size_t g) { return chunk_of(g) * (master_bytes_ + state_bytes_); };
    std::vector<std::uint32_t> reads(groups, kNoOp), writes(groups, kNoOp);
    const auto read = [&](std::size_t g) {
      reads[g] = emit(Op{.kind = OpKind::NvmeRead,
                         .stream = Stream::Nvme,
                         .phase = Phase::Optimizer,
                         .sub_group = std::int32_t(g),
                         .link = Link::NvmeRead,
                         .bytes = state_of(g),
                         .swapped = Swapped::OptimizerStates},
                      effects(), {after, before, g >= sets ? writes[g - sets] : kNoOp});
    };
    std::uint32_t last = after;
    for (std::size_t g = 0; g < groups; ++g) {
      if (reads[g] == kNoOp) read(g);
      if (read_ahead && g + 1 < groups) read(g + 1);
      const bool waits_write = g > 0 && !zero_.offload_optimizer.pipeline_write;
      last = host_optimizer_step(std::int32_t(g), chunk_of(g), g + 1 == groups,
                                 {last, reads[g], waits_write ? writes[g - 1] : kNoOp});
      if (param_device_ == Device::Nvme)
        last = swap_out_updated_params(std::int32_t(g), size, last);
      writes[g] = emit(Op{.kind = OpKind::NvmeWrite,
                          .stream = Stream::Nvme,
                          .phase = Phase::Optimizer,
                          .sub_group = std::int32_t(g),
                          .link = Link::NvmeWrite,
                          .bytes = state_of(g),
                          .swapped = Swapped::OptimizerStates},
                       effects(), {last});
    }
    return writes.empty() ? last : writes.back();
  }

  // Parameters on NVMe beside a swapped optimizer: after each sub-group's update DeepSpeed swaps
  // out the parameter partitions it updated, waiting for them before the sub-group's states go
  // (stage3.py step -> _reassign_or_swap_out_partitioned_parameters ->
  // _partitioned_params_swap_out; AsyncPartitionedParameterSwapper.swap_out_partitioned_params, a
  // blocking pool swap-out), one request per tensor partition. A partition that straddles
  // sub-groups is written by the one that completes it.
  std::uint32_t swap_out_updated_params(std::int32_t group, Elements group_elements,
                                        std::uint32_t after) {
    const ParamLayout& p = params();
    Elements end = 0;
    Bytes bytes = 0;
    std::int32_t requests = 0;
    for (std::size_t t = 0; t < p.tensor_partition.size(); ++t) {
      if (!p.tensor_trainable[t]) continue;  // frozen: in no sub-group, never rewritten
      const Elements partition = p.tensor_partition[t];
      end += partition;
      if (partition == 0 || (end - 1) / group_elements != group) continue;
      bytes += partition * param_bytes_;
      ++requests;
    }
    if (requests == 0) return after;
    return emit(Op{.kind = OpKind::NvmeWrite,
                   .stream = Stream::Nvme,
                   .phase = Phase::Optimizer,
                   .sub_group = group,
                   .link = Link::NvmeWrite,
                   .bytes = bytes,
                   .io_requests = requests,
                   .swapped = Swapped::Parameters},
                effects(), {after});
  }

  // Updated low-precision parameters go where the parameters live.
  std::uint32_t write_back_params(std::uint32_t after) {
    const Bytes bytes = params().owned * param_bytes_;
    if (param_device_ == Device::Gpu) {
      return emit(Op{.kind = OpKind::CopyH2D, .stream = Stream::H2D, .phase = Phase::Optimizer,
                     .link = Link::PcieH2D, .bytes = bytes},
                  effects(), {after});
    }
    if (param_device_ == Device::Nvme) {
      // Every trainable tensor's partition (persistent ones too) is written as it is updated.
      const auto& trainable = params().tensor_trainable;
      return emit(Op{.kind = OpKind::NvmeWrite,
                     .stream = Stream::Nvme,
                     .phase = Phase::Optimizer,
                     .link = Link::NvmeWrite,
                     .bytes = bytes,
                     .io_requests = std::int32_t(std::count(trainable.begin(), trainable.end(), true)),
                     .swapped = Swapped::Parameters},
                  effects(), {after});
    }
    return after;  // parameters offloaded to the CPU are updated in place there
  }

  // Stages 1-2: all-gather the updated partitions, in allgather_bucket_size shards; with expert
  // parallelism the experts' param groups over their own group after the others'
  // (all_gather_dp_groups over real_dp_process_group).
  void allgather_updated_params(std::uint32_t after) {
    after = allgather_flat_partition(after, params().flat_partition, dp(), ProcessGroup::Data);
    if (params().expert_dp_size > 0) {
      allgather_flat_partition(after, params().expert_flat_partition, params().expert_dp_size,
                               ProcessGroup::ExpertData);
    }
  }

  std::uint32_t allgather_flat_partition(std::uint32_t after, Elements partition, int ranks,
                                         ProcessGroup group) {
    const Elements total = partition * ranks;
    const Elements shards = std::max<Elements>(1, ceil_div(total, std::max<Elements>(1, zero_.allgather_bucket_size)));
    const Elements base = partition / shards;
    const Elements remainder = partition % shards;
    std::uint32_t previous = after;
    for (Elements shard = 0; shard < shards; ++shard) {
      const Elements elements = base + (shard < remainder ? 1 : 0);
      if (elements == 0) continue;
      previous = emit(Op{.kind = OpKind::AllGather,
                         .stream = Stream::Collective,
                         .phase = Phase::Optimizer,
                         .group_size = ranks,
                         .group = group,
                         .link = Link::Network,
                         .bytes = elements * ranks * param_bytes_,
                         .wire_element_bytes = std::int32_t(param_bytes_)},
                      effects(), {previous});
    }
    return previous;
  }

  // Stage 3: persistent parameters are kept whole on every rank, but their update happens on the
  // partitions, so DeepSpeed all-gathers them after the step (stage3.py, _post_step), one call per
  // parameter (partition_parameters.py _allgather_params_coalesced).
  void allgather_persistent_params(std::uint32_t after) {
    const ParamLayout& p = params();
    Elements padded = 0;
    std::int32_t tensors = 0;
    for (std::size_t t = 0; t < p.tensor_numel.size(); ++t) {
      if (!p.tensor_persistent[t]) continue;
      padded += p.tensor_partition[t] * p.group_size_of(t);
      ++tensors;
    }
    emit(Op{.kind = OpKind::AllGather,
            .stream = Stream::Collective,
            .phase = Phase::Optimizer,
            .group_size = dp(),
            .link = Link::Network,
            .bytes = padded * param_bytes_,
            .calls = tensors,
            .wire_element_bytes = std::int32_t(param_bytes_)},
         effects(), {after});
  }

  const Model& model_;
  const TrainingConfig& config_;
  const ZeroConfig zero_;  // as the framework runs it (TrainingConfig::effective_zero)
  const bool fsdp_;        // PyTorch FSDP: fp32 shards, per-unit reduce-scatter buffers
  const bool colossalai_;  // ColossalAI's ShardedModelV2 (sim/schedule/colossalai.hpp)
  const bool delayed_update_;  // ZeRO-Offload's delayed parameter update
  ScheduleOptions options_;
  Schedule schedule_;
  Bytes param_bytes_ = 2, grad_bytes_ = 2, master_bytes_ = 4, state_bytes_ = 8;
  Bytes partition_param_bytes_ = 2;       // stage-3 partition: the training dtype, fp32 under FSDP
  Bytes reduce_bytes_ = 2;                // FSDP: reduce_dtype
  Bytes reduce_scatter_input_bytes_ = 0;  // FSDP: the last unit's reduce-scatter input, still held
  Device optimizer_device_ = Device::Gpu, param_device_ = Device::Gpu;
  std::int32_t micro_ = 0;
  // stage 3
  std::vector<int> use_owner_, use_layer_;
  std::vector<bool> live_;
  Elements live_elements_ = 0;
  std::vector<std::uint32_t> gather_op_;
  std::vector<std::int64_t> prefetched_until_;
  std::vector<bool> secondary_;  // hpZ: the owner's secondary partition exists (this step)
  // gradients
  std::vector<bool> grads_touched_;
  Bucket bucket_;
  std::vector<std::int32_t> pending_;  // tensors of the bucket being filled
  // Per layer, of the tensors it owns: their stored elements, their trainable elements, and the
  // largest 4-bit one's elements (dequantized around its matmul).
  std::vector<Elements> layer_stored_, layer_trainable_, layer_dequantized_;
  std::uint32_t bucket_producer_ = kNoOp;
  std::uint32_t tp_wait_ =
      kNoOp;  // the last tensor-parallel collective: the next compute waits for it
  std::uint32_t last_reduce_ = kNoOp, last_d2h_ = kNoOp, blocking_reduce_ = kNoOp;
  Bytes grads_partition_bytes_ = 0;  // stages 1-2, on the GPU, freed after the update
  bool pending_ipg_alloc_ = false;
  Bytes ipg_bytes_ = 0;
  mutable std::vector<Elements> flat_offsets_;
  // ColossalAI
  Elements bucket_row_ = 0;                 // the bucketer's row (per rank), elements
  Elements colossal_pending_chunks_ = 0;    // the bucket's filled part of a row
  bool colossal_bucket_allocated_ = false;  // the bucket's buffers exist (this backward)
  Bytes colossal_saved_grad_bytes_ = 0;     // gradient shards saved this step
  std::vector<bool> shard_on_host_;         // per tensor: its parameter shard is in host memory
  // per layer: the last op that made, moved or released its shards (a move waits for it)
  std::vector<std::uint32_t> shard_op_;
  std::uint32_t last_compute_ = kNoOp;  // the last op emitted on the compute stream
  // Gemini: the steady step's moves (null: none), and the uses recorded for its simulation
  const GeminiStep* gemini_ = nullptr;
  std::vector<GeminiUse> gemini_uses_;
  std::vector<std::size_t> gemini_period_, gemini_sample_;  // per use: first op, op after adjust
  std::vector<std::int32_t> gemini_micro_;
  std::size_t gemini_backward_end_ = 0;  // the first micro-step's post-backward
  // the delayed update's CPU step (the previous step's gradients); the step's last backward
  std::uint32_t delayed_step_ = kNoOp, last_backward_ = kNoOp;
};

}  // namespace

// Placement "auto": a first pass without evictions gives Gemini its warm-up statistics; the
// schedule is the steady step the simulated policy settles into.
Schedule build_schedule(const Model& model, const TrainingConfig& config, const ResolvedBatch& batch,
                        std::int64_t seq_len, int dp_size, int gpus_per_node,
                        const ScheduleOptions& options) {
  if (!config.is_colossalai() || config.colossalai.placement != PlacementPolicy::Auto)
    return ScheduleBuilder(model, config, batch, seq_len, dp_size, gpus_per_node, options).build();
  ScheduleBuilder first(model, config, batch, seq_len, dp_size, gpus_per_node, options);
  const Schedule statistics = first.build();
  const GeminiPlacement placement = simulate_gemini(first.gemini_input(statistics));
  Schedule schedule = ScheduleBuilder(model, config, batch, seq_len, dp_size, gpus_per_node,
                                      options, &placement.steady)
                          .build();
  schedule.gemini = {.active = true,
                     .warmup_evicted = placement.warmup.evicted_bytes,
                     .warmup_fetched = placement.warmup.fetched_bytes,
                     .steady_evicted = placement.steady.evicted_bytes,
                     .steady_fetched = placement.steady.fetched_bytes,
                     .failure = placement.steady.failure};
  return schedule;
}

}  // namespace zerolens
