#include "exec/engine/context.hpp"

#include <algorithm>

namespace zerolens::exec {
namespace {

// The plan decides whether an fp32 master partition exists (and where): the engine follows it.
bool plans_master(const Schedule& schedule) {
  return std::any_of(schedule.resident.begin(), schedule.resident.end(),
                     [](const MemEffect& effect) {
                       return effect.component == Component::MasterPartition && effect.bytes > 0;
                     });
}

}  // namespace

TensorOffsets tensor_offsets(const ParamLayout& layout) {
  TensorOffsets offsets;
  Elements flat = 0, owned = 0;
  for (std::size_t t = 0; t < layout.tensor_numel.size(); ++t) {
    offsets.flat.push_back(flat);
    offsets.partition.push_back(owned);
    flat += layout.tensor_numel[t];
    owned += layout.tensor_partition[t];
  }
  return offsets;
}

std::vector<OwnedSegment> owned_segments(const ParamLayout& layout, ZeroStage stage, int rank) {
  const TensorOffsets offsets = tensor_offsets(layout);
  std::vector<OwnedSegment> segments;
  for (std::size_t t = 0; t < layout.tensor_numel.size(); ++t) {
    const Elements numel = layout.tensor_numel[t];
    Elements begin = 0, end = numel, owned_offset = offsets.flat[t];
    if (stage.partitions_parameters()) {
      const Elements partition = layout.tensor_partition[t];
      begin = std::min(numel, rank * partition);
      end = std::min(numel, begin + partition);
      owned_offset = offsets.partition[t];
    } else if (stage.partitions_optimizer_states()) {
      const Elements first = rank * layout.flat_partition, last = first + layout.flat_partition;
      begin = std::clamp(first - offsets.flat[t], Elements(0), numel);
      end = std::clamp(last - offsets.flat[t], Elements(0), numel);
      owned_offset = offsets.flat[t] + begin - first;
    }
    if (end > begin) segments.push_back({std::int32_t(t), begin, end - begin, owned_offset});
  }
  return segments;
}

OwnedSegment clip(const OwnedSegment& segment, Elements begin, Elements end) {
  const Elements first = std::max(begin, segment.owned_offset);
  const Elements last = std::min(end, segment.owned_offset + segment.length);
  if (last <= first) return {segment.tensor, segment.begin, 0, first};
  return {segment.tensor, segment.begin + (first - segment.owned_offset), last - first, first};
}

EngineContext::EngineContext(const Plan& plan_, Communicator& comm_, MemoryLedger& ledger_)
    : plan(plan_),
      schedule(plan_.schedule),
      model(plan_.request.model),
      layout(plan_.schedule.layout),
      comm(comm_),
      ledger(ledger_),
      stage(plan_.schedule.context.zero_stage()),
      dp(plan_.schedule.context.dp_size),
      rank(comm_.rank()),
      param_format(format_of(plan_.request.config.precision.precision)),
      grad_format(plan_.request.config.precision.grad_bytes() == 4 ? NumberFormat::Fp32
                                                                   : param_format),
      mixed(plan_.request.config.precision.mixed()),
      has_master(plans_master(plan_.schedule)),
      optimizer_device(device_of(plan_.schedule.context.optimizer_device)),
      param_device(device_of(plan_.schedule.context.param_device)),
      writes_back_params(std::any_of(plan_.schedule.ops.begin(), plan_.schedule.ops.end(),
                                     [](const Op& op) {
                                       return op.kind == OpKind::CopyH2D &&
                                              op.phase == Phase::Optimizer && op.layer < 0;
                                     })),
      offsets(tensor_offsets(layout)),
      segments(owned_segments(layout, stage, rank)) {}

std::size_t EngineContext::owner_of(std::size_t layer) const {
  const int shared = model.layers[layer].shares_params_of;
  return shared >= 0 ? std::size_t(shared) : layer;
}

std::pair<std::int32_t, std::int32_t> EngineContext::tensors_of_layer(std::size_t owner) const {
  return {layout.layer_first_tensor[owner], layout.layer_first_tensor[owner + 1]};
}

}  // namespace zerolens::exec
