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

const Schedule& rank_schedule(const Plan& plan, int stage) {
  if (plan.pipeline_stages.empty()) return plan.schedule;
  return plan.pipeline_stages.at(std::size_t(stage)).schedule;
}

const Model& rank_model(const Plan& plan, int stage) {
  if (plan.pipeline_stages.empty()) return plan.rank_model;
  return plan.pipeline_stages.at(std::size_t(stage)).model;
}

EngineContext::EngineContext(const Plan& plan_, Communicator& comm_, MemoryLedger& ledger_)
    : EngineContext(plan_,
                    std::make_shared<const ProcessGroups>(
                        comm_, ParallelShape{.tensor = 1, .data = comm_.size(), .pipeline = 1},
                        plan_.schedule.context.shard_group, plan_.schedule.context.hpz_group),
                    ledger_) {}

EngineContext::EngineContext(const Plan& plan_, std::shared_ptr<const ProcessGroups> groups_,
                             MemoryLedger& ledger_)
    : groups(std::move(groups_)),
      plan(plan_),
      schedule(rank_schedule(plan_, groups->place().stage)),
      model(rank_model(plan_, groups->place().stage)),
      layout(schedule.layout),
      comm(groups->shard()),
      ledger(ledger_),
      stage(schedule.context.zero_stage()),
      dp(schedule.context.shard_size()),
      rank(comm.rank()),
      data_parallel(schedule.context.dp_size),
      data_rank(groups->data().rank()),
      param_format(format_of(plan_.request.config.precision.precision)),
      grad_format(plan_.request.config.precision.grad_bytes() == 4 ? NumberFormat::Fp32
                                                                   : param_format),
      mixed(plan_.request.config.precision.mixed()),
      has_master(plans_master(schedule)),
      optimizer_device(device_of(schedule.context.optimizer_device)),
      param_device(device_of(schedule.context.param_device)),
      writes_back_params(std::any_of(schedule.ops.begin(), schedule.ops.end(),
                                     [](const Op& op) {
                                       return op.kind == OpKind::CopyH2D &&
                                              op.phase == Phase::Optimizer && op.layer < 0;
                                     })),
      offsets(tensor_offsets(layout)),
      segments(owned_segments(layout, stage, rank)) {
  const bool first_of_group = groups->place().tensor == 0;
  for (const Layer& layer : model.layers) {
    if (layer.shares_params_of >= 0) continue;
    // The last stage's copy of the tied word embeddings is the first stage's, counted there.
    const bool copy = layer.kind == LayerKind::LmHead && model.tied_embedding_end;
    for (const TensorSpec& tensor : layer.params) {
      counted_in_norm.push_back(!copy &&
                                (tensor.split != TensorSplit::Replicated || first_of_group));
      sequence_parallel_grad.push_back(tensor.sequence_parallel_grad);
    }
  }
}

std::size_t EngineContext::owner_of(std::size_t layer) const {
  const int shared = model.layers[layer].shares_params_of;
  return shared >= 0 ? std::size_t(shared) : layer;
}

std::pair<std::int32_t, std::int32_t> EngineContext::tensors_of_layer(std::size_t owner) const {
  return {layout.layer_first_tensor[owner], layout.layer_first_tensor[owner + 1]};
}

}  // namespace zerolens::exec
