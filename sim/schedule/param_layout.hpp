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
// stage-3 partition sizes; the flat stage-1/2 partition.
struct ParamLayout {
  std::vector<std::int32_t> layer_first_tensor;  // per layer: first global tensor id
  std::vector<Elements> tensor_numel;            // per global tensor id
  std::vector<std::int32_t> tensor_layer;        // per global tensor id: owning layer
  std::vector<Elements> tensor_partition;        // stage 3: ceil(numel / dp) per tensor
  std::vector<bool> tensor_persistent;           // stage 3: kept whole on every rank
  Elements total = 0;                            // all parameters
  Elements flat_partition = 0;                   // stages 1-2: ceil(total / dp)
  Elements owned = 0;                            // elements whose optimizer state this rank owns
  Elements persistent = 0;                       // stage 3: persistent elements (whole)
  int dp_size = 1;
  int stage = 0;

  // The elements of one optimizer sub-group: sub_group_size of the owned elements; DeepSpeed's 0
  // makes every parameter a sub-group of its own (stage3.py _create_fp16_sub_groups), planned as
  // sub-groups the size of the largest parameter's partition. At least 1.
  Elements sub_group_elements(Elements sub_group_size) const;
};

ParamLayout make_param_layout(const Model& model, const ZeroConfig& zero, int dp_size,
                              bool model_states_only);

}  // namespace zerolens
