#include "exec/engine/context.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

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

bool is_expert(const ParamLayout& layout, std::size_t tensor) {
  return layout.expert_dp_size > 0 && tensor < layout.tensor_expert.size() &&
         layout.tensor_expert[tensor];
}

TensorOffsets tensor_offsets(const ParamLayout& layout) {
  TensorOffsets offsets;
  Elements flat[2] = {0, 0}, owned = 0;
  for (std::size_t t = 0; t < layout.tensor_numel.size(); ++t) {
    Elements& running = flat[is_expert(layout, t) ? 1 : 0];
    offsets.flat.push_back(running);
    offsets.partition.push_back(owned);
    running += layout.tensor_numel[t];
    owned += layout.tensor_partition[t];
  }
  return offsets;
}

Elements owned_base(const ParamLayout& layout, ZeroStage stage, bool expert) {
  if (!expert) return 0;
  if (!stage.partitions_optimizer_states()) return layout.trainable - layout.expert_total;
  return stage.uses_flat_partition() ? layout.flat_partition : 0;
}

std::vector<OwnedSegment> owned_segments(const ParamLayout& layout, ZeroStage stage, int rank,
                                         int expert_rank) {
  const TensorOffsets offsets = tensor_offsets(layout);
  std::vector<OwnedSegment> segments;
  for (std::size_t t = 0; t < layout.tensor_numel.size(); ++t) {
    const bool expert = is_expert(layout, t);
    const int place = expert ? expert_rank : rank;
    const Elements numel = layout.tensor_numel[t], base = owned_base(layout, stage, expert);
    Elements begin = 0, end = numel, owned_offset = base + offsets.flat[t];
    if (stage.partitions_parameters()) {
      const Elements partition = layout.tensor_partition[t];
      begin = std::min(numel, place * partition);
      end = std::min(numel, begin + partition);
      owned_offset = offsets.partition[t];
    } else if (stage.partitions_optimizer_states()) {
      const Elements partition = expert ? layout.expert_flat_partition : layout.flat_partition;
      const Elements first = place * partition, last = first + partition;
      begin = std::clamp(first - offsets.flat[t], Elements(0), numel);
      end = std::clamp(last - offsets.flat[t], Elements(0), numel);
      owned_offset = base + offsets.flat[t] + begin - first;
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
                        plan_.schedule.context.shard_group, plan_.schedule.context.hpz_group,
                        plan_.schedule.context.expert_parallel),
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
      offsets(tensor_offsets(layout)) {
  spaces[0] = {.comm = &comm,
               .ranks = dp,
               .rank = rank,
               .flat_partition = layout.flat_partition,
               .owned_base = 0};
  if (layout.expert_dp_size > 0) {
    Communicator* experts = groups->expert_data();
    if (experts == nullptr || experts->size() != layout.expert_dp_size) {
      throw std::logic_error("the process groups were not split for the plan's " +
                             std::to_string(layout.expert_dp_size) +
                             "-rank expert-data-parallel groups");
    }
    spaces[1] = {.comm = experts,
                 .ranks = experts->size(),
                 .rank = experts->rank(),
                 .flat_partition = layout.expert_flat_partition,
                 .owned_base = owned_base(layout, stage, true)};
  }
  segments = owned_segments(layout, stage, rank, spaces[1].rank);
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
