#include "sim/plan/plan.hpp"

#include <algorithm>
#include <sstream>
#include <string>

#include "sim/core/error.hpp"
#include "sim/model/lora.hpp"
#include "sim/schedule/builder.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens {
namespace {

std::string format_ratio(double ratio) {
  std::ostringstream text;
  text << ratio;
  return text.str();
}

DeviceReport device_report(Device device, const DevicePeak& peak, const Cluster& cluster,
                           int ranks_per_node) {
  DeviceReport report;
  report.device = device;
  report.peak_per_rank = peak.peak;
  report.peak_op = peak.peak_op;
  report.ranks_sharing = device == Device::Gpu ? 1 : ranks_per_node;
  report.peak = peak.peak * report.ranks_sharing;
  for (int c = 0; c < kCategoryCount; ++c) {
    report.categories[std::size_t(c)] = peak.categories[std::size_t(c)] * report.ranks_sharing;
  }
  for (int c = 0; c < kComponentCount; ++c) {
    report.components[std::size_t(c)] = peak.components[std::size_t(c)] * report.ranks_sharing;
  }
  switch (device) {
    case Device::Gpu: report.capacity = cluster.gpu.memory_bytes; break;
    case Device::Cpu: report.capacity = cluster.node.cpu_memory_bytes; break;
    case Device::Nvme: report.capacity = cluster.node.nvme_capacity_bytes; break;
  }
  return report;
}

// DeepSpeed reads offload_optimizer.ratio only in ZeRO-3's optimizer
// (runtime/zero/offload_config.py: "Only valid with ZeRO Stage 3"); stage 1/2 offload everything
// whatever it says.
void add_offload_ratio_note(Plan& plan) {
  const ZeroConfig& zero = plan.request.config.zero;
  const double ratio = zero.offload_optimizer.ratio;
  if (ratio == 1.0 || zero.offload_optimizer.device == OffloadDevice::None) return;
  if (zero.stage < 3) {
    plan.notes.push_back("zero_optimization.offload_optimizer.ratio " + format_ratio(ratio) +
                         " is ignored: DeepSpeed applies it only at ZeRO-3; stage " +
                         std::to_string(zero.stage) + " offloads every optimizer state");
  } else {
    plan.notes.push_back(
        "zero_optimization.offload_optimizer.ratio " + format_ratio(ratio) +
        ": partial optimizer offload is parsed, not modelled; predicted as ratio 1 (every "
        "optimizer state offloaded)");
  }
}

std::string gigabytes(Bytes bytes) {
  std::ostringstream text;
  text.precision(3);
  text << double(bytes) / 1e9 << " GB";
  return text.str();
}

// ColossalAI's Gemini: what the warm-up step moved, what each later step moves, or why it fails.
void add_gemini_note(Plan& plan) {
  const GeminiReport& g = plan.schedule.gemini;
  if (!g.active) return;
  if (!g.failure.empty()) {
    plan.notes.push_back(
        "Gemini (tensor_placement_policy auto) cannot place the parameter "
        "shards: ColossalAI raises '" +
        g.failure + "'");
    return;
  }
  plan.notes.push_back(
      "Gemini (tensor_placement_policy auto): the warm-up step, which measures the non-model "
      "memory, evicts " +
      gigabytes(g.warmup_evicted) +
      " of parameter shards to the host and "
      "fetches " +
      gigabytes(g.warmup_fetched) + "; each later step (planned here) evicts " +
      gigabytes(g.steady_evicted) + " and fetches " + gigabytes(g.steady_fetched));
}

// A learned position table (GPT-2's wpe) has max_positions rows: a longer sequence cannot run.
void add_positions_note(Plan& plan) {
  const auto& shape = plan.request.model.shape;
  if (!shape || !shape->learned_positions || plan.seq_len <= shape->max_positions) return;
  plan.notes.push_back(
      "seq_len " + std::to_string(plan.seq_len) + " is beyond the model's " +
      std::to_string(shape->max_positions) +
      " learned positions: a real run fails at its position table (predicted as if it "
      "were longer)");
}

void add_notes(Plan& plan) {
  const auto& config = plan.request.config;
  if (config.activation_checkpointing.partition_activations && !config.tensor_parallel.active()) {
    plan.notes.push_back(
        "activation_checkpointing.partition_activations partitions checkpoints across "
        "model-parallel ranks; with data parallelism only it changes nothing");
  }
  if (!(plan.request.cluster.gpu.peak_flops(config.precision.precision) > 0)) {
    plan.notes.push_back(plan.request.cluster.gpu.name + " has no " + to_string(config.precision.precision) +
                         " support: the memory figures hold, but such a job cannot run on it");
  }
  const OffloadConfig& swap = config.zero.offload_optimizer;
  const int optimizer_states = int(config.optimizer.state_bytes_per_param() / 4);
  if (swap.device == OffloadDevice::Nvme && (swap.pipeline_read || swap.pipeline_write) &&
      optimizer_swap_buffer_sets(swap, optimizer_states) < 2) {
    plan.notes.push_back("offload_optimizer.pipeline_read/pipeline_write need buffers for two sub-groups (buffer_count >= " +
                         std::to_string(2 * optimizer_swap_buffers_per_sub_group(optimizer_states)) + "); with buffer_count " +
                         std::to_string(swap.buffer_count) + " sub-groups are swapped one at a time");
  }
  add_offload_ratio_note(plan);
  add_positions_note(plan);
  if (config.is_colossalai()) {
    plan.notes.push_back(
        "ColossalAI: ZeroHook gathers each module's parameters before it runs and shards them "
        "after; zerolens's ops are per layer, so a layer's modules are planned gathered together "
        "(an upper bound by the layer's size less its largest module's)");
  } else if (config.zero.partitions_parameters()) {
    plan.notes.push_back("stage 3: parameters are gathered per layer; prefetch and release follow "
                         "stage3_prefetch_bucket_size, stage3_max_live_parameters and "
                         "stage3_max_reuse_distance in steady state (after the first step's trace)");
  }
}

// The schedule sums activation bytes in 64 bits; a step that needs more than 2^60 bytes is a
// mistyped batch or sequence length and is rejected before it can overflow.
void check_activation_total(const Model& model, std::int64_t micro_batch, std::int64_t seq_len,
                            std::int64_t target_len) {
  if (seq_len > (std::int64_t(1) << 24)) throw InputError("seq_len", "must be at most 2^24");
  if (micro_batch > (std::int64_t(1) << 30)) throw InputError("train_micro_batch_size_per_gpu", "must be at most 2^30");
  double total = 0;
  for (const auto& layer : model.layers) {
    const ActivationBytes bytes = layer.activation_bytes(micro_batch, seq_len, 4, target_len);
    total += double(bytes.stored) + double(bytes.forward_working) + double(bytes.backward_working);
  }
  if (!(total < 0x1p60)) {
    throw InputError("micro-batch x seq-len", "activations of one step exceed 2^60 bytes; reduce the micro-batch or the sequence length");
  }
}

// ZeRO++ as DeepSpeed builds its groups. qwZ quantizes a fetch over the parameter's own group
// (partition_parameters.py all_gather_coalesced: get_partition_dp_group, the data_parallel_group
// zero.Init was given, Megatron's DP group): with TP it runs over the DP group of each TP
// coordinate, as zerolens plans it. hpZ's secondary groups are runs of zero_hpz_partition_size
// consecutive ranks of the world (utils/groups.py _create_zero_param_parallel_group) and qgZ's
// all-to-alls run over a node's world ranks and then the world (_get_local_all_to_all_group;
// coalesced_collectives.py all_to_all_quant_reduce divides by dist.get_world_size()), whatever the
// model-parallel groups: with TP innermost they would mix TP peers, whose shards differ.
void check_zeropp(const PlanRequest& request) {
  const ZeroConfig& zero = request.config.zero;
  if (!zero.zeropp() || zero.stage != 3) return;
  const std::string key =
      "zero_optimization." + std::string(zero.hpz_partition_size > 1 ? "zero_hpz_partition_size"
                                         : zero.quantized_weights    ? "zero_quantized_weights"
                                                                     : "zero_quantized_gradients");
  if (request.config.is_fsdp() || request.config.is_colossalai())
    throw InputError(key, "ZeRO++ is DeepSpeed's; FSDP and ColossalAI have no such option");
  if (request.config.pipeline.active())  // validate() refuses stage 3 with a pipeline first
    throw InputError(key, "ZeRO++ is stage 3's, which DeepSpeed's pipeline engine does not run");
  if (request.config.tensor_parallel.active() &&
      (zero.hpz_partition_size > 1 || zero.quantized_gradients))
    throw InputError(zero.hpz_partition_size > 1 ? "zero_optimization.zero_hpz_partition_size"
                                                 : "zero_optimization.zero_quantized_gradients",
                     "DeepSpeed builds hpZ's secondary groups and qgZ's all-to-all groups from "
                     "consecutive ranks of the world, not of the data-parallel group: with tensor "
                     "parallelism they would hold tensor-parallel peers, whose parameters and "
                     "gradients differ; qwZ (zero_quantized_weights) runs with --tp");
  if (zero.shard_group_size > 0 && zero.shard_group_size < request.dp_size)
    throw InputError(key, "ZeRO++ with hybrid sharding (mics_shard_size) is not modelled");
  const int hpz = zero.hpz_partition_size;
  if (hpz > 1 && request.dp_size % std::min(hpz, request.dp_size) != 0) {
    throw InputError("zero_optimization.zero_hpz_partition_size",
                     "groups of " + std::to_string(hpz) + " ranks must divide the " +
                         std::to_string(request.dp_size) + " data-parallel ranks");
  }
  if (hpz > 1 && zero.offload_param.device != OffloadDevice::None) {
    throw InputError("zero_optimization.zero_hpz_partition_size",
                     "hpZ's secondary partition with offload_param is not modelled");
  }
  const int per_node = request.cluster.node.gpus_per_node;
  if (zero.quantized_gradients && request.dp_size > per_node && request.dp_size % per_node != 0) {
    throw InputError("zero_optimization.zero_quantized_gradients",
                     "qgZ's all-to-all needs whole nodes: " + std::to_string(request.dp_size) +
                         " ranks are not a multiple of the node's " + std::to_string(per_node) +
                         " GPUs");
  }
}

// DeepSpeed's expert-parallel groups (utils/groups.py _create_expert_and_data_parallel): runs of
// ep_size consecutive data-parallel ranks, which must split the data-parallel group
// (_ensure_divisibility) and, as zerolens places them, a node's ranks evenly.
void check_expert_parallel(const PlanRequest& request, int dp_ranks_per_node) {
  const int ep = request.config.expert_parallel.size;
  if (ep <= 1) return;
  if (request.dp_size % ep != 0) {
    throw InputError("moe.ep_size", "expert-parallel groups of " + std::to_string(ep) +
                                        " ranks must divide the " +
                                        std::to_string(request.dp_size) + " data-parallel ranks");
  }
  if (dp_ranks_per_node % ep != 0 && ep % dp_ranks_per_node != 0) {
    throw InputError("moe.ep_size", "an expert-parallel group of " + std::to_string(ep) +
                                        " ranks must fill a node's " +
                                        std::to_string(dp_ranks_per_node) +
                                        " data-parallel ranks evenly (divide them, or be a "
                                        "multiple of them)");
  }
}

std::string format_number(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// What a mixture-of-experts plan assumes about its routing.
void add_moe_notes(Plan& plan) {
  const Layer* moe = nullptr;
  for (const Layer& layer : plan.rank_model.layers) {
    if (layer.moe) {
      moe = &layer;
      break;
    }
  }
  const ExpertParallelism& ep = plan.request.config.expert_parallel;
  const bool capacity_set = ep.capacity_factor != ExpertParallelism{}.capacity_factor ||
                            ep.min_capacity != ExpertParallelism{}.min_capacity;
  if (!moe) {
    if (capacity_set)
      plan.notes.push_back(
          "moe.capacity_factor and moe.min_capacity apply to mixture-of-experts "
          "models only: ignored");
    return;
  }
  const MoeRouting& r = *moe->moe;
  const std::string experts = std::to_string(r.experts) + " experts";
  if (!r.exchanges()) {
    plan.notes.push_back(
        "mixture of experts without expert parallelism: every rank holds all " + experts +
        " of each MoE layer as ordinary parameters, and each token's top-" +
        std::to_string(r.top_k) + " experts are computed (Hugging Face's dropless blocks)" +
        (capacity_set ? "; moe.capacity_factor and moe.min_capacity apply with --ep only" : ""));
    return;
  }
  const std::int64_t tokens = plan.batch.micro_batch_per_gpu * plan.seq_len;
  plan.notes.push_back("expert parallelism " + std::to_string(r.expert_parallel) +
                       ": each rank holds " + std::to_string(r.local_experts) + " of the " +
                       experts + " of each MoE layer, their parameters data-parallel over " +
                       std::to_string(plan.schedule.context.expert_data_parallel()) +
                       " ranks; DeepSpeed's capacity: " + std::to_string(r.capacity(tokens)) +
                       " tokens per expert per micro-step (ceil(" + std::to_string(tokens) +
                       " tokens / " + std::to_string(r.experts) + " x capacity_factor " +
                       format_number(r.capacity_factor) + " x top-" + std::to_string(r.top_k) +
                       "), at least min_capacity " + std::to_string(r.min_capacity) + ")");
}

// A frozen base (LoRA) and a 4-bit one (QLoRA), in what zerolens plans them with: DeepSpeed's ZeRO,
// whose optimizer keeps the trainable parameters only and whose stage 3 partitions the packed 4-bit
// codes as parameters of the training dtype (bitsandbytes' quant_storage; PEFT's "Use PEFT QLoRA
// and DeepSpeed with ZeRO3"). What it does not model is refused by name.
void check_frozen_base(const PlanRequest& request) {
  const Model& model = request.model;
  const bool quantized = has_quantized_weights(model);
  const bool frozen = model.trainable_parameter_count() < model.parameter_count();
  if (!frozen && !quantized) return;
  const std::string key = quantized ? "--quantize-base" : "--lora-rank";
  const TrainingConfig& config = request.config;
  if (model.trainable_parameter_count() == 0)
    throw InputError(key, "the model has no trainable parameter");
  if (config.is_fsdp()) {
    throw InputError(key,
                     std::string("frozen parameters under FSDP are not modelled (FSDP keeps ") +
                         "its shards in fp32 as the optimizer's master, which a frozen base "
                         "is not); plan LoRA with --framework deepspeed");
  }
  if (!quantized) return;
  if (config.zero.effective_offload(OffloadKind::Param) != OffloadDevice::None)
    throw InputError(key,
                     "4-bit base weights with zero_optimization.offload_param are not "
                     "modelled; plan them on the GPU (--offload-param none)");
  if (config.zero.partitions_parameters() && config.zero.zeropp())
    throw InputError(key,
                     "ZeRO++ over 4-bit base weights is not modelled (qwZ would quantize "
                     "packed codes); plan them without --hpz, --quantized-weights and "
                     "--quantized-gradients");
}

// Ranks are placed TP innermost: a TP group is a node's consecutive ranks, or whole nodes.
void check_placement(const PlanRequest& request) {
  const int tp = request.config.tensor_parallel.size;
  const int per_node = request.cluster.node.gpus_per_node;
  const std::int64_t world = std::int64_t(request.dp_size) * tp * request.config.pipeline.size;
  if (request.cluster.total_gpus() < world) {
    throw InputError(
        "--gpus", std::to_string(request.dp_size) + " data-parallel x " + std::to_string(tp) +
                      " tensor-parallel x " + std::to_string(request.config.pipeline.size) +
                      " pipeline ranks need " + std::to_string(world) + " GPUs; the cluster has " +
                      std::to_string(request.cluster.total_gpus()));
  }
  const int shard = request.config.zero.shard_group_size;
  if (shard > 0 && request.dp_size % shard != 0) {
    throw InputError("zero_optimization.mics_shard_size",
                     "a shard group of " + std::to_string(shard) + " ranks must divide the " +
                         std::to_string(request.dp_size) + " data-parallel ranks");
  }
  if (tp <= 1) return;
  if (per_node % tp != 0 && tp % per_node != 0) {
    throw InputError("--tp", "a tensor-parallel group of " + std::to_string(tp) +
                                 " ranks must fill a node's " + std::to_string(per_node) +
                                 " GPUs evenly (divide it, or be a multiple of it)");
  }
}

// Every stage's schedule and replay; the stage that uses the most GPU memory (device used, then
// allocated; the first of equals) becomes the plan's schedule and rank model.
void plan_pipeline_stages(Plan& plan, const PlanRequest& request, const ScheduleOptions& options,
                          ReplayDetail detail, MemoryTimeline& replay) {
  const int stages = request.config.pipeline.size;
  for (int stage = 0; stage < stages; ++stage) {
    PipelineStagePlan stage_plan;
    stage_plan.model = pipeline_stage_model(plan.rank_model, request.config.pipeline, stage);
    stage_plan.schedule =
        build_schedule(stage_plan.model, request.config, plan.batch, plan.seq_len, request.dp_size,
                       request.cluster.node.gpus_per_node, options);
    MemoryTimeline stage_replay = replay_memory(stage_plan.schedule, detail);
    stage_plan.gpu_allocated = stage_replay.gpu.allocated;
    stage_plan.gpu_device_used = stage_replay.gpu.device_used;
    const auto usage = [](const PipelineStagePlan& p) {
      return std::pair(p.gpu_device_used, p.gpu_allocated);
    };
    const bool worse =
        stage == 0 ||
        usage(stage_plan) > usage(plan.pipeline_stages[std::size_t(plan.pipeline_stage)]);
    if (worse) {
      plan.pipeline_stage = stage;
      replay = std::move(stage_replay);
    }
    plan.pipeline_stages.push_back(std::move(stage_plan));
  }
  const PipelineStagePlan& chosen = plan.pipeline_stages[std::size_t(plan.pipeline_stage)];
  plan.schedule = chosen.schedule;
  plan.rank_model = chosen.model;
}

}  // namespace

bool Plan::fits() const {
  for (const auto& device : devices) {
    if (!device.fits()) return false;
  }
  return true;
}

Plan make_plan(PlanRequest request) {
  MemoryTimeline replay;
  return make_plan(std::move(request), ReplayDetail::Peaks, replay);
}

Plan make_plan(PlanRequest request, ReplayDetail detail, MemoryTimeline& replay) {
  request.config.validate();
  if (request.dp_size < 1) throw InputError("gpus", "the data-parallel size must be at least 1");
  Plan plan;
  plan.seq_len = request.config.seq_len.value_or(request.model.default_seq_len);
  if (plan.seq_len < 1) throw InputError("seq_len", "must be positive");
  plan.batch = resolve_batch(request.config.batch, request.dp_size);
  plan.rank_model =
      expert_parallel_shard(tensor_parallel_shard(request.model, request.config.tensor_parallel),
                            request.config.expert_parallel);
  if (request.config.activation_checkpointing.partition_activations)
    partition_checkpoints(plan.rank_model, request.config.tensor_parallel.size);
  check_placement(request);
  check_zeropp(request);
  check_expert_parallel(
      request, std::max(1, std::min(request.dp_size, request.cluster.node.gpus_per_node /
                                                         request.config.tensor_parallel.size)));
  check_frozen_base(request);
  if (request.config.target_seq_len && !plan.rank_model.has_target_sequence()) {
    throw InputError("--target-seq-len", "applies to encoder-decoder models (T5, mT5): '" +
                                             request.model.name + "' has one sequence (--seq-len)");
  }
  check_activation_total(plan.rank_model, plan.batch.micro_batch_per_gpu, plan.seq_len,
                         request.config.target_seq_len.value_or(plan.seq_len));
  const int gpus_per_node = request.cluster.node.gpus_per_node;
  ScheduleOptions options = request.options;
  // The allocator may reserve what the GPU has beyond the memory it does not manage.
  options.gpu_capacity = request.cluster.gpu.memory_bytes;
  options.allocator.device_limit =
      std::max<Bytes>(0, request.cluster.gpu.memory_bytes - options.cuda_context_bytes -
                             options.library_workspace_bytes);
  if (request.config.pipeline.active()) {
    plan_pipeline_stages(plan, request, options, detail, replay);
  } else {
    plan.schedule = build_schedule(plan.rank_model, request.config, plan.batch, plan.seq_len,
                                   request.dp_size, gpus_per_node, options);
    replay = replay_memory(plan.schedule, detail);
  }
  const int ranks_per_node = plan.schedule.context.ranks_per_node();
  for (int d = 0; d < kDeviceCount; ++d) {
    plan.devices[std::size_t(d)] =
        device_report(Device(d), replay.devices[std::size_t(d)], request.cluster, ranks_per_node);
  }
  plan.gpu = replay.gpu;
  plan.devices[std::size_t(Device::Gpu)].allocator_out_of_memory =
      replay.gpu.allocator_out_of_memory;
  plan.comm = summarize_comm(plan.schedule);
  plan.devices[std::size_t(Device::Gpu)].placement_failed = !plan.schedule.gemini.failure.empty();
  plan.request = std::move(request);
  add_notes(plan);
  add_moe_notes(plan);
  add_gemini_note(plan);
  return plan;
}

}  // namespace zerolens
