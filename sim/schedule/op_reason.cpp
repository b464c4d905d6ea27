// Why an op happens, in a sentence, for the walkthrough and the GUI's step bar: what ZeRO (or the
// offload, the parallelism) keeps where, so that this op has to run here.
#include <string>

#include "sim/schedule/schedule.hpp"

namespace zerolens {
namespace {

std::string name_of(const Model& model, std::int32_t layer) {
  if (layer < 0 || std::size_t(layer) >= model.layers.size()) return "the model";
  return model.layers[std::size_t(layer)].name;
}

std::string share(const ScheduleContext& context) {
  return "1/" + std::to_string(context.shard_size());
}
std::string ranks(const ScheduleContext& context) {
  return std::to_string(context.shard_size()) + " ranks";
}

// The layer whose parameters `layer` uses (a tied LM head uses the embedding's).
std::int32_t owner_of(const Model& model, std::int32_t layer) {
  if (layer < 0 || std::size_t(layer) >= model.layers.size()) return layer;
  const int shared = model.layers[std::size_t(layer)].shares_params_of;
  return shared >= 0 ? shared : layer;
}

bool is_compute(OpKind kind) {
  return kind == OpKind::Forward || kind == OpKind::Backward || kind == OpKind::Recompute;
}

// The next compute op after `index` in program order, or nullptr.
const Op* next_compute(const Schedule& schedule, std::size_t index) {
  for (std::size_t i = index + 1; i < schedule.ops.size(); ++i)
    if (is_compute(schedule.ops[i].kind)) return &schedule.ops[i];
  return nullptr;
}

// ColossalAI's ZeroHook (zero/utils/zero_hook.py) and its shard strategies.
std::string colossalai_gather_reason(const Op& op, const ScheduleContext& c, const Model& model) {
  const std::string phase = op.phase == Phase::Forward ? "forward" : "backward";
  const std::string how =
      c.shard_strategy == ShardStrategy::BucketTensor
          ? "BucketTensorShardStrategy flattens a module's shards into one all-gather (fewer, "
            "larger messages: a bias rides with its weight)"
          : "TensorShardStrategy all-gathers each tensor on its own";
  return "ColossalAI keeps 1/" + std::to_string(c.shard_size()) +
         " of every parameter on a rank; ZeroHook gathers a module's parameters just before its " +
         phase + " (here " + name_of(model, op.layer) + "'s) and shards them again after: " + how;
}

std::string gather_reason(const Schedule& schedule, std::size_t index, const Model& model) {
  const Op& op = schedule.ops[index];
  const ScheduleContext& c = schedule.context;
  if (c.colossalai && op.layer >= 0) return colossalai_gather_reason(op, c, model);
  if (op.group == ProcessGroup::Tensor)
    return "sequence parallelism: each rank holds a slice of the sequence, and the tensor-parallel "
           "matrix product "
           "needs all of it";
  if (op.group == ProcessGroup::ExpertData)
    return "ZeRO-" + std::to_string(c.stage) + " with expert parallelism: each rank updated 1/" +
           std::to_string(op.group_size) +
           " of its experts' parameters; gathering over the ranks holding the same experts gives "
           "each its experts whole again";
  if (op.layer < 0 || op.phase == Phase::Optimizer)
    return "ZeRO-" + std::to_string(c.stage) + ": each rank updated only its " + share(c) +
           " of the parameters; gathering the updated partitions gives every rank the whole model "
           "again";
  const std::string layer = name_of(model, op.layer);
  if (op.group == ProcessGroup::Secondary)
    return "ZeRO++ hpZ: the forward left a secondary copy of " + layer +
           " partitioned within the node, so the " + "backward gathers it over " +
           std::to_string(op.group_size) + " ranks of the node instead of all";
  const Op* next = next_compute(schedule, index);
  const std::string phase = op.phase == Phase::Forward ? "forward" : "backward";
  if (next && owner_of(model, next->layer) != op.layer)
    return "prefetch: ZeRO-3 gathers " + layer + " ahead of its " + phase +
           " (stage3_prefetch_bucket_size), so the transfer runs while the compute before it does";
  const std::string used_by = next && next->layer != op.layer
                                  ? " (whose weights " + name_of(model, next->layer) + " shares)"
                                  : "";
  return "ZeRO-3 keeps " + share(c) + " of each layer's parameters on a rank, so " + layer +
         used_by + " is gathered from the " + ranks(c) + " just before the " + phase +
         " that uses it";
}

std::string reduce_reason(const Op& op, const ScheduleContext& c) {
  if (op.group == ProcessGroup::Tensor)
    return "tensor parallelism: each rank computed a partial result of the layer; the collective "
           "sums them "
           "(Megatron's g operator)";
  if (op.kind == OpKind::AllReduce && c.stage == 0)
    return "plain data parallelism: every rank holds every parameter, so it needs the sum of all "
           "ranks' "
           "gradients of each";
  if (op.group == ProcessGroup::Expert)
    return "expert parallelism: each of the " + std::to_string(op.group_size) + " ranks holds 1/" +
           std::to_string(op.group_size) +
           " of the layer's experts, so its tokens go to the ranks of their experts (an [experts, "
           "capacity, hidden] buffer) and the experts' outputs come back";
  if (op.group == ProcessGroup::ExpertData)
    return "expert parallelism: the ranks that hold the same experts (every " +
           std::to_string(c.expert_parallel) + "th of the data-parallel group, " +
           std::to_string(op.group_size) +
           " ranks) sum their gradients; ZeRO partitions them "
           "over those ranks";
  if (op.kind == OpKind::AllToAll)
    return "ZeRO++ qgZ: gradients are quantized to int4 and exchanged in two hops, within the "
           "node, then across";
  return "ZeRO-" + std::to_string(c.stage) + " keeps " + share(c) +
         " of the gradients on a rank: the bucket is summed over the " + ranks(c) +
         " and each keeps the slice it updates; the unreduced gradients are freed";
}

// ColossalAI's placements: "cpu" moves a layer's shards per use, "auto" (Gemini) moves them as its
// policy decides; both offload the gradients.
std::string colossalai_copy_reason(const Op& op, const ScheduleContext& c) {
  const bool out = op.kind == OpKind::CopyD2H;
  if (op.bucket >= 0)
    return "tensor_placement_policy " + std::string(to_string(c.placement)) +
           " offloads gradients: the reduced fp16 shard goes to host memory, where it is "
           "converted to fp32 for the update";
  if (op.phase == Phase::Optimizer)
    return "the fp32 master shards are updated in host memory; each is cast to fp16 and copied "
           "into its parameter shard, which is on the GPU";
  if (c.placement == PlacementPolicy::Cpu)
    return out ? "tensor_placement_policy cpu: the shards go back to host memory once used"
               : "tensor_placement_policy cpu keeps the shards in host memory: they come to the "
                 "GPU for the layer's gather";
  return out ? "Gemini (auto) evicts these shards to make room for the next layer's, within the "
               "GPU memory the warm-up step left for model data (farthest next use first)"
             : "Gemini (auto) brings the layer's shards back to the GPU before it runs";
}

std::string copy_reason(const Op& op, const ScheduleContext& c) {
  if (c.colossalai) return colossalai_copy_reason(op, c);
  if (c.delayed_update && op.kind == OpKind::CopyH2D && op.phase == Phase::Optimizer)
    return "delayed parameter update: the parameters updated from the previous step's gradients "
           "come to the GPU once this step's backward is done with the old ones";
  if (op.kind == OpKind::CopyD2H)
    return op.bucket >= 0 ? "optimizer offload: the reduced gradients go to host memory, where the "
                            "CPU optimizer "
                            "updates the fp32 master weights"
                          : "offload: the data leaves the GPU for host memory";
  if (op.phase == Phase::Optimizer)
    return "optimizer offload: the updated 16-bit parameters come back from the host";
  if (op.layer >= 0)
    return "parameter offload: the rank's partition lives in host memory and comes to the GPU to "
           "be gathered";
  return "offload: the data comes back from host memory";
}

std::string optimizer_reason(const ScheduleContext& c) {
  if (c.stage == 0)
    return "plain data parallelism: every rank updates the whole model (every state is replicated)";
  return "ZeRO-" + std::to_string(c.stage) + ": a rank's optimizer updates only its " + share(c) +
         " of the parameters: its gradients, fp32 master weights and Adam moments are partitioned";
}

}  // namespace

std::string op_reason(const Schedule& schedule, std::size_t index, const Model& model) {
  const Op& op = schedule.ops.at(index);
  const ScheduleContext& c = schedule.context;
  switch (op.kind) {
    case OpKind::AllGather:
      return gather_reason(schedule, index, model);
    case OpKind::ReduceScatter:
    case OpKind::AllReduce:
    case OpKind::AllToAll:
      return reduce_reason(op, c);
    case OpKind::Release:
      if (op.layer < 0)
        return "ColossalAI's ReduceScatterBucketer frees its bucket after the backward "
               "(reducer.free())";
      if (c.colossalai)
        return "ColossalAI's post hook shards " + name_of(model, op.layer) +
               "'s parameters again: each rank keeps its " + share(c) +
               " (get_shard makes it anew) and the gathered tensors are freed";
      return "ZeRO-3 frees " + name_of(model, op.layer) +
             "'s gathered parameters once they are used: only the " + "rank's " + share(c) +
             " partition stays";
    case OpKind::CopyH2D:
    case OpKind::CopyD2H:
      return copy_reason(op, c);
    case OpKind::NvmeRead:
    case OpKind::NvmeWrite:
      if (op.swapped == Swapped::Parameters && op.kind == OpKind::NvmeWrite)
        return "ZeRO-Infinity keeps the parameters on NVMe: the partitions an update changed are "
               "written back right after it";
      return "ZeRO-Infinity keeps these states on NVMe: they are " +
             std::string(op.kind == OpKind::NvmeRead ? "read in before" : "written back after") +
             " their use";
    case OpKind::OptimizerStep:
      if (op.delayed)
        return "ZeRO-Offload's delayed parameter update: the CPU updates the previous step's "
               "gradients while the GPU runs this step's forward and backward on parameters one "
               "step stale";
      return optimizer_reason(c);
    case OpKind::Forward:
      return c.activation_checkpointing
                 ? "activation checkpointing: only the layer's input is kept for the backward"
                 : "";
    case OpKind::Recompute:
      return "activation checkpointing: the forward runs again to rebuild the activations its "
             "backward needs";
    case OpKind::GradNorm:
    case OpKind::OverflowCheck:
      if (op.group == ProcessGroup::Tensor)
        return "tensor parallelism: the ranks of the TP group hold different parts of the model, "
               "so the scalar is all-reduced over the group too";
      if (op.group == ProcessGroup::Pipeline)
        return "pipeline parallelism: each stage holds its own layers, so the scalar is "
               "all-reduced over the stages too";
      return "the gradient norm and the overflow check need every rank's partition: one scalar "
             "all-reduce";
    case OpKind::Send:
    case OpKind::Recv:
      return "pipeline parallelism: activations go to the next stage in the forward, their "
             "gradients back in the "
             "backward";
    case OpKind::Backward:
    case OpKind::Broadcast:
    case OpKind::LossScaleUpdate:
      return "";
  }
  return "";
}

}  // namespace zerolens
