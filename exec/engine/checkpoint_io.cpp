#include "exec/engine/checkpoint_io.hpp"

#include <algorithm>

#include "sim/core/error.hpp"

namespace zerolens::exec {
namespace {

std::vector<CheckpointTensor> tensors_of(const Model& model) {
  std::vector<CheckpointTensor> tensors;
  for (const Layer& layer : model.layers) {
    if (layer.shares_params_of >= 0) continue;
    for (const TensorSpec& spec : layer.params)
      tensors.push_back({spec.name, spec.shape, spec.numel()});
  }
  return tensors;
}

void append(std::vector<float>& out, Numbers values) {
  const std::size_t first = out.size();
  out.resize(first + values.size());
  values.read(std::span(out).subspan(first));
}

}  // namespace

CheckpointIo::CheckpointIo(EngineContext& context, ParameterStore& params,
                           OptimizerRunner& optimizer, NvmeSwapper& nvme)
    : ctx_(context), params_(params), optimizer_(optimizer), nvme_(nvme) {}

CheckpointMeta CheckpointIo::meta() const {
  CheckpointMeta meta;
  meta.model = ctx_.model.name;
  meta.tensors = tensors_of(ctx_.model);
  meta.step = optimizer_.optimizer().step();
  meta.dp_size = ctx_.dp;
  meta.stage = ctx_.stage.number;
  meta.optimizer = to_string(ctx_.config().optimizer.type);
  meta.optimizer_states = int(optimizer_.optimizer().state_per_element());
  meta.loss_scale = optimizer_.scaler().scale();
  meta.good_steps = optimizer_.scaler().good_steps();
  meta.hysteresis_left = optimizer_.scaler().hysteresis_left();
  return meta;
}

// Master weights: the fp32 master partition, else (fp32 on the device) the parameters themselves.
Numbers CheckpointIo::master_weights(const OwnedSegment& segment) {
  if (ctx_.has_master)
    return optimizer_.master().sub(std::size_t(segment.owned_offset), std::size_t(segment.length));
  return params_.device_params(segment);
}

// A checkpoint holds one value per tensor (consolidated from the ranks' segments); with expert
// parallelism each expert-parallel rank's experts are tensors of their own under the same ids.
void CheckpointIo::require_no_experts() const {
  if (ctx_.layout.expert_dp_size > 0) {
    throw InputError("--ep",
                     "checkpoints of expert-parallel runs are not written or restored yet (each "
                     "expert-parallel rank's experts would need tensors of their own in the "
                     "consolidated checkpoint)");
  }
}

RankShard CheckpointIo::shard() {
  require_no_experts();
  RankShard shard;
  shard.rank = ctx_.rank;
  const std::size_t states = optimizer_.optimizer().state_per_element();
  shard.states.resize(states);
  const bool in_files = nvme_.optimizer_in_files();
  std::vector<float> swapped = in_files ? nvme_.read_optimizer_objects() : std::vector<float>();
  const auto owned = std::size_t(ctx_.layout.owned);
  // [master | first | second] from the files, else the buffers in memory (host or device)
  const auto from_files = [&](std::size_t object) {
    return Numbers(std::span(swapped).subspan(object * owned, owned));
  };
  const Numbers state_numbers[2] = {in_files ? from_files(1) : optimizer_.first_state(),
                                    in_files ? from_files(2) : optimizer_.second_state()};
  for (const OwnedSegment& segment : ctx_.segments) {
    shard.segments.push_back({segment.tensor, segment.begin, segment.length});
    const auto offset = std::size_t(segment.owned_offset), length = std::size_t(segment.length);
    append(shard.master, in_files ? from_files(0).sub(offset, length) : master_weights(segment));
    for (std::size_t k = 0; k < states; ++k)
      append(shard.states[k], state_numbers[k].sub(offset, length));
  }
  return shard;
}

void CheckpointIo::restore(const FullState& state) {
  require_no_experts();
  const CheckpointMeta mine = meta();
  const auto same_tensor = [](const CheckpointTensor& a, const CheckpointTensor& b) {
    return a.name == b.name && a.shape == b.shape;
  };
  if (!std::equal(mine.tensors.begin(), mine.tensors.end(), state.meta.tensors.begin(),
                  state.meta.tensors.end(), same_tensor)) {
    throw CheckpointError("checkpoint of model '" + state.meta.model + "' does not match '" +
                          mine.model + "' (tensor names or shapes differ)");
  }
  if (state.meta.optimizer_states != mine.optimizer_states ||
      state.meta.optimizer != mine.optimizer) {
    throw CheckpointError("checkpoint optimizer " + state.meta.optimizer +
                          " differs from this run's " + mine.optimizer);
  }
  params_.restore(state);
  restore_optimizer(state);
  optimizer_.optimizer().restore_step(state.meta.step);
  optimizer_.scaler().restore(state.meta.loss_scale, state.meta.good_steps,
                              state.meta.hysteresis_left);
}

// NVMe: assembled over the owned partition here, then written sub-group by sub-group.
void CheckpointIo::restore_optimizer(const FullState& state) {
  const bool in_files = nvme_.optimizer_in_files();
  const auto owned = std::size_t(ctx_.layout.owned);
  const std::size_t states_per_element = optimizer_.optimizer().state_per_element();
  std::vector<float> master(in_files ? owned : 0);
  std::vector<std::vector<float>> states(in_files ? states_per_element : 0,
                                         std::vector<float>(owned));
  const Numbers master_numbers = in_files ? Numbers(std::span(master)) : optimizer_.master();
  Numbers state_numbers[2] = {optimizer_.first_state(), optimizer_.second_state()};
  for (std::size_t k = 0; k < states.size(); ++k) state_numbers[k] = Numbers(std::span(states[k]));
  for (const OwnedSegment& segment : ctx_.segments) {
    const auto offset = std::size_t(segment.owned_offset), length = std::size_t(segment.length);
    const auto from = [&](const std::vector<float>& whole) {
      return std::span(whole).subspan(std::size_t(segment.begin), length);
    };
    if (ctx_.has_master)
      master_numbers.sub(offset, length).write(from(state.master[std::size_t(segment.tensor)]));
    for (std::size_t k = 0; k < states_per_element; ++k) {
      state_numbers[k]
          .sub(offset, length)
          .write(from(state.states[k][std::size_t(segment.tensor)]));
    }
  }
  if (in_files) nvme_.restore_optimizer(master, states);
}

}  // namespace zerolens::exec
