#pragma once
// Where each parameter tensor lives across the data-parallel ranks: the facts the schedule and the
// executor share.
#include <cstdint>
#include <vector>

#include "sim/config/config.hpp"
#include "sim/core/units.hpp"
#include "sim/model/model.hpp"

namespace zerolens {

// Per-tensor facts the schedule and executor share: global tensor ids in model order, sizes and
// stage-3 partition sizes; the flat stage-1/2 partition. Frozen tensors (LoRA's base) have no
// gradient and no optimizer state: DeepSpeed keeps only parameters that require grad in its
// optimizer's groups (stage_1_and_2.py: trainable_parameters -> bit16_groups; stage3.py
// _get_trainable_parameter_groups), so the flat partition and the owned elements are the trainable
// ones', while every tensor is still held (stages 0-2) or partitioned and gathered (stage 3).
struct ParamLayout {
  std::vector<std::int32_t> layer_first_tensor;  // per layer: first global tensor id
  std::vector<Elements> tensor_numel;            // per global tensor id
  std::vector<std::int32_t> tensor_layer;        // per global tensor id: owning layer
  std::vector<bool> tensor_trainable;            // per global tensor id: has a gradient
  // Per global tensor id: training-dtype elements that hold it (numel; a 4-bit tensor's packed
  // codes), and the 4-bit quantization state kept whole beside it on every rank.
  std::vector<Elements> tensor_stored;
  std::vector<Bytes> tensor_quantization_state;
  std::vector<Elements> tensor_partition;        // stage 3: ceil(stored / dp) per tensor
  std::vector<bool> tensor_persistent;           // stage 3: kept whole on every rank
  Elements total = 0;                            // all parameters
  Elements stored = 0;                           // their stored elements
  Elements trainable = 0;                        // parameters with gradients
  Bytes quantization_state = 0;                  // every tensor's quantization state
  Elements flat_partition = 0;                   // stages 1-2: ceil(trainable but experts / dp)
  Elements owned = 0;                            // elements whose optimizer state this rank owns
  Elements persistent = 0;                       // stage 3: persistent stored elements (whole)
  int dp_size = 1;
  int stage = 0;
  // Expert parallelism (docs/parallelism.md): a routed expert's tensor is data-parallel over the
  // expert-data-parallel group (dp / ep ranks) instead of dp. DeepSpeed puts the expert parameters
  // in param groups of their own (moe/utils.py
  // split_params_into_different_moe_groups_for_optimizer) which stages 1-2 partition over that
  // group (stage_1_and_2.py _configure_moe_settings: real_dp_process_group and partition_count per
  // group): flat_partition is then the other tensors' over dp, expert_flat_partition the experts'
  // over expert_dp_size.
  std::vector<bool> tensor_expert;  // per global tensor id
  int expert_dp_size = 0;           // 0: no expert parallelism
  Elements expert_total = 0;        // this rank's trainable experts' elements
  Elements expert_flat_partition = 0;
  // The ranks tensor `t` is data-parallel over: dp_size, or expert_dp_size for an expert's.
  int group_size_of(std::size_t tensor) const {
    return expert_dp_size > 0 && tensor_expert[tensor] ? expert_dp_size : dp_size;
  }

  // The elements of one optimizer sub-group: sub_group_size of the owned elements; DeepSpeed's 0
  // makes every parameter a sub-group of its own (stage3.py _create_fp16_sub_groups), planned as
  // sub-groups the size of the largest parameter's partition. At least 1.
  Elements sub_group_elements(Elements sub_group_size) const;
};

// `element_bytes`: the training dtype's, which stores a 4-bit tensor's codes (quant_storage).
// `expert_parallel` above 1 partitions the model's expert tensors over dp_size / expert_parallel.
ParamLayout make_param_layout(const Model& model, const ZeroConfig& zero, int dp_size,
                              bool model_states_only, Bytes element_bytes,
                              int expert_parallel = 1);

}  // namespace zerolens
