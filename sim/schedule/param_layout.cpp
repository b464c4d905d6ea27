#include <algorithm>

#include "sim/schedule/param_layout.hpp"

#include "sim/model/lora.hpp"

namespace zerolens {

ParamLayout make_param_layout(const Model& model, const ZeroConfig& zero, int dp_size,
                              bool model_states_only, Bytes element_bytes, int expert_parallel) {
  ParamLayout layout;
  layout.dp_size = dp_size;
  layout.stage = zero.stage;
  if (expert_parallel > 1) layout.expert_dp_size = std::max(1, dp_size / expert_parallel);
  // The ZeRO paper's accounting partitions every tensor; DeepSpeed keeps stage-3 tensors of at most
  // stage3_param_persistence_threshold elements whole on every rank, up to the model-wide cap.
  const Elements threshold = model_states_only ? -1 : zero.stage3_param_persistence_threshold;
  const Elements model_cap = zero.stage3_model_persistence_threshold;
  for (std::size_t layer = 0; layer < model.layers.size(); ++layer) {
    layout.layer_first_tensor.push_back(std::int32_t(layout.tensor_numel.size()));
    for (const auto& tensor : model.layers[layer].params) {
      const Elements numel = tensor.numel();
      const Elements stored = stored_elements(numel, tensor.format, element_bytes);
      const bool expert = layout.expert_dp_size > 0 && tensor.expert;
      layout.tensor_numel.push_back(numel);
      layout.tensor_layer.push_back(std::int32_t(layer));
      layout.tensor_trainable.push_back(tensor.trainable);
      layout.tensor_expert.push_back(expert);
      layout.tensor_stored.push_back(stored);
      layout.tensor_quantization_state.push_back(quantization_state_bytes(numel, tensor.format));
      layout.tensor_partition.push_back(ceil_div(stored, expert ? layout.expert_dp_size : dp_size));
      if (expert && tensor.trainable) layout.expert_total += numel;
      // (DeepSpeed's threshold reads ds_numel: the stored tensor's elements.)
      const bool persistent = zero.partitions_parameters() && stored <= threshold &&
                              layout.persistent + stored <= model_cap;
      layout.tensor_persistent.push_back(persistent);
      if (persistent) layout.persistent += stored;
      layout.total += numel;
      layout.stored += stored;
      layout.quantization_state += layout.tensor_quantization_state.back();
      if (tensor.trainable) layout.trainable += numel;
    }
  }
  layout.layer_first_tensor.push_back(std::int32_t(layout.tensor_numel.size()));
  layout.flat_partition = ceil_div(layout.trainable - layout.expert_total, dp_size);
  if (layout.expert_dp_size > 0)
    layout.expert_flat_partition = ceil_div(layout.expert_total, layout.expert_dp_size);
  if (!zero.partitions_optimizer_states()) {
    layout.owned = layout.trainable;
  } else if (zero.zero_stage().uses_flat_partition()) {
    layout.owned = layout.flat_partition + layout.expert_flat_partition;
  } else {
    for (std::size_t t = 0; t < layout.tensor_partition.size(); ++t)
      if (layout.tensor_trainable[t]) layout.owned += layout.tensor_partition[t];
  }
  return layout;
}

Elements ParamLayout::sub_group_elements(Elements sub_group_size) const {
  Elements size = sub_group_size;
  if (size <= 0) {
    for (std::size_t t = 0; t < tensor_numel.size(); ++t) {
      if (t < tensor_trainable.size() && !tensor_trainable[t]) continue;  // not in a sub-group
      const Elements owned_part = t < tensor_partition.size()
                                      ? tensor_partition[t]
                                      : ceil_div(tensor_numel[t], Elements(dp_size));
      size = std::max(size, owned_part);
    }
  }
  return std::max<Elements>(1, size);
}

}  // namespace zerolens
