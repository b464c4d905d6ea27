// Names of the schedule's enums, as used in JSON, traces, tables and the GUI, and plain-language
// descriptions of its ops.
#include "sim/schedule/schedule.hpp"

#include "sim/schedule/colossalai.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "sim/core/error.hpp"

namespace zerolens {

Device device_of(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::None: return Device::Gpu;
    case OffloadDevice::Cpu: return Device::Cpu;
    case OffloadDevice::Nvme: return Device::Nvme;
  }
  return Device::Gpu;
}

const char* to_string(Device device) {
  switch (device) {
    case Device::Gpu: return "gpu";
    case Device::Cpu: return "cpu";
    case Device::Nvme: return "nvme";
  }
  return "gpu";
}

const char* to_string(Category category) {
  switch (category) {
    case Category::Params: return "params";
    case Category::Grads: return "grads";
    case Category::MasterParams: return "master_params";
    case Category::OptimizerStates: return "optimizer_states";
    case Category::Activations: return "activations";
    case Category::Buffers: return "buffers";
    case Category::Overhead: return "overhead";
  }
  return "params";
}

const char* to_string(Component component) {
  switch (component) {
    case Component::ParamsFull: return "params_full";
    case Component::ParamsPartition: return "params_partition";
    case Component::ParamsPersistent: return "params_persistent";
    case Component::ParamsSecondary:
      return "params_secondary";
    case Component::ParamsQuantizationState:
      return "params_quantization_state";
    case Component::GradsFull: return "grads_full";
    case Component::GradsPartition: return "grads_partition";
    case Component::MasterPartition: return "master_params_partition";
    case Component::OptimizerStatePartition: return "optimizer_states_partition";
    case Component::ActivationsStored: return "activations_stored";
    case Component::ActivationCheckpoints: return "activation_checkpoints";
    case Component::ActivationWorking: return "activation_working_set";
    case Component::GatheredParams: return "gathered_params";
    case Component::UnreducedGrads: return "unreduced_grads";
    case Component::ReduceBucket: return "reduce_bucket";
    case Component::Fp32GradCast: return "fp32_grad_cast";
    case Component::OptimizerTemporaries: return "optimizer_temporaries";
    case Component::DequantizedWeight:
      return "dequantized_weight";
    case Component::OffloadStaging: return "offload_staging";
    case Component::NvmeSwapBuffers: return "nvme_swap_buffers";
    case Component::CudaContext: return "cuda_context";
    case Component::LibraryWorkspace: return "library_workspace";
    case Component::Fragmentation: return "fragmentation";
  }
  return "params_full";
}

Category category_of(Component component) {
  switch (component) {
    case Component::ParamsFull:
    case Component::ParamsPartition:
    case Component::ParamsPersistent:
    case Component::ParamsSecondary:
    case Component::ParamsQuantizationState:
      return Category::Params;
    case Component::GradsFull:
    case Component::GradsPartition: return Category::Grads;
    case Component::MasterPartition: return Category::MasterParams;
    case Component::OptimizerStatePartition: return Category::OptimizerStates;
    case Component::ActivationsStored:
    case Component::ActivationCheckpoints:
    case Component::ActivationWorking: return Category::Activations;
    case Component::GatheredParams:
    case Component::UnreducedGrads:
    case Component::ReduceBucket:
    case Component::Fp32GradCast:
    case Component::OptimizerTemporaries:
    case Component::DequantizedWeight:
    case Component::OffloadStaging:
    case Component::NvmeSwapBuffers: return Category::Buffers;
    case Component::CudaContext:
    case Component::LibraryWorkspace:
    case Component::Fragmentation: return Category::Overhead;
  }
  return Category::Buffers;
}

Sharing sharing_of(Component component) {
  switch (component) {
    case Component::ParamsPartition:
    case Component::GradsPartition:
    case Component::MasterPartition:
    case Component::OptimizerStatePartition:
    case Component::Fp32GradCast:
    case Component::OptimizerTemporaries:
    case Component::ParamsSecondary:
      return Sharing::Partitioned;
    case Component::ParamsFull:
    case Component::ParamsPersistent:
    case Component::ParamsQuantizationState:
    case Component::GradsFull:
    case Component::GatheredParams:
    case Component::UnreducedGrads:
    case Component::ReduceBucket:
      return Sharing::Replicated;
    default:
      return Sharing::Unshared;
  }
}

const char* to_string(ProcessGroup group) {
  switch (group) {
    case ProcessGroup::Data:
      return "dp";
    case ProcessGroup::Tensor:
      return "tp";
    case ProcessGroup::Pipeline:
      return "pp";
    case ProcessGroup::Replicate:
      return "replicate";
    case ProcessGroup::Secondary:
      return "hpz";
    case ProcessGroup::NodeLocal:
      return "node";
    case ProcessGroup::CrossNode:
      return "cross_node";
    case ProcessGroup::Expert:
      return "ep";
    case ProcessGroup::ExpertData:
      return "expert_dp";
  }
  return "dp";
}

RankPlace place_of_rank(int rank, const ParallelShape& shape) {
  return {.tensor = rank % shape.tensor,
          .data = rank / shape.tensor % shape.data,
          .stage = rank / (shape.tensor * shape.data)};
}

int rank_at(const RankPlace& place, const ParallelShape& shape) {
  return place.tensor + shape.tensor * (place.data + shape.data * place.stage);
}

bool ScheduleContext::stage_on_same_node(int other_stage) const {
  const ParallelShape shape = parallel_shape();
  const std::int64_t per_node = std::max(1, gpus_per_node);
  return rank_at({.stage = pipeline_stage}, shape) / per_node ==
         rank_at({.stage = other_stage}, shape) / per_node;
}

int ScheduleContext::ranks_per_node() const {
  const std::int64_t world = std::int64_t(dp_size) * tensor_parallel * pipeline_parallel;
  return int(std::max<std::int64_t>(1, std::min<std::int64_t>(world, gpus_per_node)));
}

int ScheduleContext::data_parallel_ranks_per_node() const {
  return std::max(1, std::min(dp_size, gpus_per_node / std::max(1, tensor_parallel)));
}

const char* to_string(Stream stream) {
  switch (stream) {
    case Stream::Compute: return "compute";
    case Stream::Collective: return "collective";
    case Stream::H2D: return "h2d";
    case Stream::D2H: return "d2h";
    case Stream::Nvme: return "nvme";
    case Stream::Cpu: return "cpu";
    case Stream::TensorParallel:
      return "tp";
    case Stream::Pipeline:
      return "pp";
    case Stream::ExpertParallel:
      return "ep";
  }
  return "compute";
}

const char* to_string(OpKind kind) {
  switch (kind) {
    case OpKind::Forward: return "forward";
    case OpKind::Backward: return "backward";
    case OpKind::Recompute: return "recompute";
    case OpKind::AllGather: return "all_gather";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::Release: return "release";
    case OpKind::CopyH2D: return "copy_h2d";
    case OpKind::CopyD2H: return "copy_d2h";
    case OpKind::NvmeRead: return "nvme_read";
    case OpKind::NvmeWrite: return "nvme_write";
    case OpKind::OptimizerStep: return "optimizer_step";
    case OpKind::OverflowCheck: return "overflow_check";
    case OpKind::GradNorm: return "grad_norm";
    case OpKind::LossScaleUpdate: return "loss_scale_update";
    case OpKind::Send:
      return "send";
    case OpKind::Recv:
      return "recv";
    case OpKind::AllToAll:
      return "all_to_all";
  }
  return "forward";
}

const char* to_string(Phase phase) {
  switch (phase) {
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Reduce: return "reduce";
    case Phase::Optimizer: return "optimizer";
  }
  return "forward";
}

bool is_collective(OpKind kind) {
  return kind == OpKind::AllGather || kind == OpKind::ReduceScatter || kind == OpKind::AllReduce ||
         kind == OpKind::Broadcast || kind == OpKind::OverflowCheck || kind == OpKind::GradNorm ||
         kind == OpKind::AllToAll;
}

const char* to_string(Link link) {
  switch (link) {
    case Link::None: return "none";
    case Link::Network: return "network";
    case Link::PcieH2D: return "pcie_h2d";
    case Link::PcieD2H: return "pcie_d2h";
    case Link::NvmeRead: return "nvme_read";
    case Link::NvmeWrite: return "nvme_write";
  }
  return "none";
}

const char* to_string(AllocatorKind kind) {
  switch (kind) {
    case AllocatorKind::PytorchCaching:
      return "pytorch-caching";
    case AllocatorKind::PytorchExpandable:
      return "pytorch-expandable";
    case AllocatorKind::Flat:
      return "flat";
  }
  return "flat";
}

AllocatorKind parse_allocator_kind(const std::string& text) {
  for (const auto kind :
       {AllocatorKind::PytorchCaching, AllocatorKind::PytorchExpandable, AllocatorKind::Flat}) {
    if (text == to_string(kind)) return kind;
  }
  throw InputError("allocator",
                   "unknown allocator '" + text + "' (pytorch-caching, pytorch-expandable, flat)");
}

// Plain-language descriptions of ops, for tables, traces and the GUI.
namespace {

std::string megabytes(Bytes bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%.2f MB", double(bytes) / 1e6);
  return text;
}

std::string layer_name(const Model& model, std::int32_t layer) {
  if (layer < 0 || std::size_t(layer) >= model.layers.size()) return "the model";
  return "layer " + model.layers[std::size_t(layer)].name;
}

// Whether an expert-parallel exchange belongs to a recompute (it follows one, through the
// exchanges before it): the forward's tokens again, not gradients.
bool follows_recompute(const Schedule& schedule, std::size_t index) {
  for (;;) {
    const auto deps = schedule.deps_of(schedule.ops[index]);
    if (deps.empty()) return false;
    const Op& before = schedule.ops[deps.front()];
    if (before.kind == OpKind::Recompute) return true;
    if (before.kind != OpKind::AllToAll || before.group != ProcessGroup::Expert) return false;
    index = deps.front();
  }
}

// A global parameter tensor's name ("fc.bias").
std::string tensor_name(const Schedule& schedule, const Model& model, std::int32_t tensor) {
  const auto& layout = schedule.layout;
  if (tensor < 0 || std::size_t(tensor) >= layout.tensor_layer.size()) return "a tensor";
  const auto layer = std::size_t(layout.tensor_layer[std::size_t(tensor)]);
  const auto index = std::size_t(tensor - layout.layer_first_tensor[layer]);
  if (layer >= model.layers.size() || index >= model.layers[layer].params.size()) return "a tensor";
  return model.layers[layer].params[index].name;
}

std::string collective_subject(const Schedule& schedule, const Op& op, const Model& model) {
  if (op.group == ProcessGroup::Tensor) {
    const std::string over =
        " over its " + std::to_string(op.group_size) + "-rank tensor-parallel group";
    if (op.layer >= 0) {
      return layer_name(model, op.layer) +
             (op.phase == Phase::Forward ? "'s activations" : "'s activation gradients") + over;
    }
    return "the sequence-parallel parameters' gradients" + over;
  }
  if (op.bucket >= 0) return "gradient bucket " + std::to_string(op.bucket);
  if (op.tensor_count == 1) return tensor_name(schedule, model, op.first_tensor);
  if (op.tensor_count > 1) {
    return "module " + module_of(tensor_name(schedule, model, op.first_tensor)) + "'s " +
           std::to_string(op.tensor_count) + " parameters";
  }
  if (op.layer >= 0) return layer_name(model, op.layer) + "'s parameters";
  if (op.phase == Phase::Optimizer) return "the updated parameter partitions";
  (void)schedule;
  return "its buffer";
}

}  // namespace

namespace {

// Which group a scalar all-reduce (overflow flag, norm) runs over, when not the data-parallel one.
std::string scalar_group(const Op& op) {
  if (op.group == ProcessGroup::Tensor) return " over its TP group";
  if (op.group == ProcessGroup::Pipeline) return " over the pipeline stages";
  return "";
}

}  // namespace

std::string Schedule::describe(std::size_t op_index, const Model& model, int rank) const {
  const Op& op = ops.at(op_index);
  const std::string micro = context.grad_accumulation > 1
                                ? " (micro-step " + std::to_string(op.micro_step) + ")"
                                : std::string();
  const std::string who = "rank " + std::to_string(rank) + " ";
  switch (op.kind) {
    case OpKind::Forward:
      return who + "runs the forward of " + layer_name(model, op.layer) + micro;
    case OpKind::Backward:
      return who + "runs the backward of " + layer_name(model, op.layer) + micro;
    case OpKind::Recompute:
      return who + "recomputes the forward of " + layer_name(model, op.layer) + micro;
    case OpKind::AllGather:
      return who + "all-gathers " + collective_subject(*this, op, model) + ": " +
             megabytes(op.bytes) + " over the network" + micro;
    case OpKind::ReduceScatter:
      return who + "reduce-scatters " + collective_subject(*this, op, model) + ": " +
             megabytes(op.bytes) + " over the network" + micro;
    case OpKind::AllReduce:
      return who + "all-reduces " + collective_subject(*this, op, model) + ": " +
             megabytes(op.bytes) + " over the network" + micro;
    case OpKind::Broadcast:
      return who + "broadcasts " + collective_subject(*this, op, model) + ": " +
             megabytes(op.bytes) + micro;
    case OpKind::Release:
      if (op.layer < 0) return who + "frees the gradient reduce-scatter bucket" + micro;
      return who + "releases " + layer_name(model, op.layer) + "'s gathered parameters" + micro;
    case OpKind::CopyH2D:
      return who + "copies " + megabytes(op.bytes) + " host-to-device over PCIe" +
             (op.layer >= 0 ? " for " + layer_name(model, op.layer) : std::string()) + micro;
    case OpKind::CopyD2H:
      return who + "copies " + megabytes(op.bytes) + " device-to-host over PCIe" +
             (op.bucket >= 0 ? " (gradient bucket " + std::to_string(op.bucket) + ")"
                             : std::string()) +
             micro;
    case OpKind::NvmeRead:
      return who + "reads " + megabytes(op.bytes) + " from NVMe" + micro;
    case OpKind::NvmeWrite:
      return who + "writes " + megabytes(op.bytes) + " to NVMe" +
             (op.swapped == Swapped::Parameters && op.sub_group >= 0
                  ? " (the parameters sub-group " + std::to_string(op.sub_group) + " updated)"
                  : std::string()) +
             micro;
    case OpKind::OptimizerStep:
      return who + "updates its optimizer partition on the " +
             std::string(op.stream == Stream::Cpu ? "CPU" : "GPU") +
             (op.delayed ? " from the previous step's gradients" : "") +
             (op.sub_group >= 0 ? " (sub-group " + std::to_string(op.sub_group) + ")"
                                : std::string());
    case OpKind::OverflowCheck:
      return who + "all-reduces the fp16 overflow flag" + scalar_group(op);
    case OpKind::GradNorm:
      return who + "all-reduces the gradient norm" + scalar_group(op);
    case OpKind::LossScaleUpdate:
      return who + "updates the dynamic loss scale";
    case OpKind::Send:
      return who + "sends " +
             (op.phase == Phase::Forward ? "activations" : "activation gradients") + " (" +
             megabytes(op.bytes) + ") to pipeline stage " + std::to_string(op.peer_stage) + micro;
    case OpKind::AllToAll:
      if (op.group == ProcessGroup::Expert) {
        return who + "exchanges " + layer_name(model, op.layer) + "'s " +
               (op.phase == Phase::Forward || follows_recompute(*this, op_index)
                    ? "routed tokens"
                    : "routed tokens' gradients") +
               " with the " + std::to_string(op.group_size - 1) +
               " other ranks of its expert-parallel group: " + megabytes(op.bytes) + micro;
      }
      return who + "exchanges int4 slices of " + collective_subject(*this, op, model) + " with " +
             std::to_string(op.group_size - 1) +
             (op.group == ProcessGroup::CrossNode ? " ranks on other nodes"
                                                  : " ranks of its node") +
             ": " + megabytes(op.bytes) + micro;
    case OpKind::Recv:
      return who + "receives " +
             (op.phase == Phase::Forward ? "activations" : "activation gradients") + " (" +
             megabytes(op.bytes) + ") from pipeline stage " + std::to_string(op.peer_stage) + micro;
  }
  return who + to_string(op.kind);
}

}  // namespace zerolens
