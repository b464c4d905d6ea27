// The engine's side of checkpoints: its owned segments out, a new partition in (resharding).
#include <algorithm>

#include "exec/zero_state.hpp"

namespace zerolens::exec {
namespace {

std::vector<CheckpointTensor> tensors_of(const Model& model) {
  std::vector<CheckpointTensor> tensors;
  for (const Layer& layer : model.layers) {
    if (layer.shares_params_of >= 0) continue;
    for (const TensorSpec& spec : layer.params) tensors.push_back({spec.name, spec.shape, spec.numel()});
  }
  return tensors;
}

}  // namespace

CheckpointMeta ZeroEngine::checkpoint_meta() const {
  const State& s = *state_;
  CheckpointMeta meta;
  meta.model = s.model.name;
  meta.tensors = tensors_of(s.model);
  meta.step = s.optimizer.step();
  meta.dp_size = s.dp;
  meta.stage = s.stage.number;
  meta.optimizer = to_string(s.plan.request.config.optimizer.type);
  meta.optimizer_states = int(s.optimizer.state_per_element());
  meta.loss_scale = s.scaler.scale();
  meta.good_steps = s.scaler.good_steps();
  meta.hysteresis_left = s.scaler.hysteresis_left();
  return meta;
}

RankShard ZeroEngine::checkpoint_shard() const { return state_->checkpoint_shard(); }

void ZeroEngine::restore(const FullState& state) {
  const CheckpointMeta mine = checkpoint_meta();
  const auto same_tensor = [](const CheckpointTensor& a, const CheckpointTensor& b) {
    return a.name == b.name && a.shape == b.shape;
  };
  if (!std::equal(mine.tensors.begin(), mine.tensors.end(), state.meta.tensors.begin(), state.meta.tensors.end(), same_tensor)) {
    throw CheckpointError("checkpoint of model '" + state.meta.model + "' does not match '" + mine.model +
                          "' (tensor names or shapes differ)");
  }
  if (state.meta.optimizer_states != mine.optimizer_states || state.meta.optimizer != mine.optimizer) {
    throw CheckpointError("checkpoint optimizer " + state.meta.optimizer + " differs from this run's " + mine.optimizer);
  }
  state_->restore(state);
}

// Master weights: the fp32 master partition, else (fp32 on the device) the parameters themselves.
Numbers ZeroEngine::State::owned_params(const OwnedSegment& segment) const {
  if (has_master) return master_.view(std::size_t(segment.owned_offset), std::size_t(segment.length));
  return const_cast<State&>(*this).device_params(segment);
}

namespace {

void append(std::vector<float>& out, Numbers values) {
  const std::size_t first = out.size();
  out.resize(first + values.size());
  values.read(std::span(out).subspan(first));
}

}  // namespace

// With NVMe offload the master and states are read back from the sub-groups' files.
RankShard ZeroEngine::State::checkpoint_shard() const {
  RankShard shard;
  shard.rank = rank;
  const std::size_t states = optimizer.state_per_element();
  shard.states.resize(states);
  std::vector<float> swapped = optimizer_store_ ? read_optimizer_objects() : std::vector<float>();
  const auto owned = std::size_t(layout.owned);
  // [master | first | second] from the files, else the buffers in memory (host or device)
  const auto in_files = [&](std::size_t object) { return Numbers(std::span(swapped).subspan(object * owned, owned)); };
  const Numbers state_numbers[2] = {optimizer_store_ ? in_files(1) : first_state_.view(),
                                    optimizer_store_ ? in_files(2) : second_state_.view()};
  for (const OwnedSegment& segment : segments_) {
    shard.segments.push_back({segment.tensor, segment.begin, segment.length});
    const auto offset = std::size_t(segment.owned_offset), length = std::size_t(segment.length);
    append(shard.master, optimizer_store_ ? in_files(0).sub(offset, length) : owned_params(segment));
    for (std::size_t k = 0; k < states; ++k) append(shard.states[k], state_numbers[k].sub(offset, length));
  }
  return shard;
}

// The training-dtype parameters are the master weights rounded (16-bit) or themselves (fp32).
void ZeroEngine::State::restore(const FullState& state) {
  for (std::size_t t = 0; t < layout.tensor_numel.size(); ++t) {
    const std::vector<float>& whole = state.master[t];
    if (!stage.partitions_parameters() || layout.tensor_persistent[t])
      full_[t].view(0, whole.size()).write(whole);
    if (!stage.partitions_parameters()) continue;
    const auto partition = std::size_t(layout.tensor_partition[t]);
    const std::size_t first = std::min(whole.size(), std::size_t(rank) * partition);
    const std::size_t count = std::min(whole.size(), first + partition) - first;
    set_partition(t, std::span(whole).subspan(first, count));
  }
  // NVMe: assembled over the owned partition here, then written sub-group by sub-group
  const bool in_files = optimizer_store_ != nullptr;
  const auto owned = std::size_t(layout.owned);
  std::vector<float> master(in_files ? owned : 0);
  std::vector<std::vector<float>> states(in_files ? optimizer.state_per_element() : 0, std::vector<float>(owned));
  const Numbers master_numbers = in_files ? Numbers(std::span(master)) : master_.view();
  Numbers state_numbers[2] = {first_state_.view(), second_state_.view()};
  for (std::size_t k = 0; k < states.size(); ++k) state_numbers[k] = Numbers(std::span(states[k]));
  for (const OwnedSegment& segment : segments_) {
    const auto offset = std::size_t(segment.owned_offset), length = std::size_t(segment.length);
    const auto from = [&](const std::vector<float>& whole) {
      return std::span(whole).subspan(std::size_t(segment.begin), length);
    };
    if (has_master) master_numbers.sub(offset, length).write(from(state.master[std::size_t(segment.tensor)]));
    for (std::size_t k = 0; k < optimizer.state_per_element(); ++k) {
      state_numbers[k].sub(offset, length).write(from(state.states[k][std::size_t(segment.tensor)]));
    }
  }
  if (in_files) restore_nvme_optimizer(master, states);
  optimizer.restore_step(state.meta.step);
  scaler.restore(state.meta.loss_scale, state.meta.good_steps, state.meta.hysteresis_left);
}

}  // namespace zerolens::exec
