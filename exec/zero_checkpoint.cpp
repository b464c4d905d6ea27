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
  meta.stage = s.stage;
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
const float* ZeroEngine::State::owned_params(const OwnedSegment& segment) const {
  if (has_master) return master_.data() + segment.owned_offset;
  return const_cast<State&>(*this).device_params(segment).wide().data();
}

// With NVMe offload the master and states are read back from the sub-groups' files.
RankShard ZeroEngine::State::checkpoint_shard() const {
  RankShard shard;
  shard.rank = rank;
  const std::size_t states = optimizer.state_per_element();
  shard.states.resize(states);
  const std::vector<float> swapped = optimizer_store_ ? read_optimizer_objects() : std::vector<float>();
  const auto owned = std::size_t(layout.owned);
  const float* state_base[2] = {first_state_.data(), second_state_.data()};
  if (optimizer_store_) state_base[0] = swapped.data() + owned, state_base[1] = swapped.data() + 2 * owned;
  for (const OwnedSegment& segment : segments_) {
    shard.segments.push_back({segment.tensor, segment.begin, segment.length});
    const float* params = optimizer_store_ ? swapped.data() + segment.owned_offset : owned_params(segment);
    shard.master.insert(shard.master.end(), params, params + segment.length);
    for (std::size_t k = 0; k < states; ++k) {
      const float* values = state_base[k] + segment.owned_offset;
      shard.states[k].insert(shard.states[k].end(), values, values + segment.length);
    }
  }
  return shard;
}

// The training-dtype parameters are the master weights rounded (16-bit) or themselves (fp32).
void ZeroEngine::State::restore(const FullState& state) {
  for (std::size_t t = 0; t < layout.tensor_numel.size(); ++t) {
    const std::vector<float>& whole = state.master[t];
    if (stage < 3 || layout.tensor_persistent[t]) full_[t].view(0, whole.size()).write(whole);
    if (stage < 3) continue;
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
  float* master_base = in_files ? master.data() : master_.data();
  float* state_base[2] = {first_state_.data(), second_state_.data()};
  for (std::size_t k = 0; k < states.size(); ++k) state_base[k] = states[k].data();
  for (const OwnedSegment& segment : segments_) {
    if (has_master) {
      const std::vector<float>& whole = state.master[std::size_t(segment.tensor)];
      std::copy_n(whole.begin() + segment.begin, segment.length, master_base + segment.owned_offset);
    }
    for (std::size_t k = 0; k < optimizer.state_per_element(); ++k) {
      const std::vector<float>& whole = state.states[k][std::size_t(segment.tensor)];
      std::copy_n(whole.begin() + segment.begin, segment.length, state_base[k] + segment.owned_offset);
    }
  }
  if (in_files) restore_nvme_optimizer(master, states);
  optimizer.restore_step(state.meta.step);
  scaler.restore(state.meta.loss_scale, state.meta.good_steps, state.meta.hysteresis_left);
}

}  // namespace zerolens::exec
