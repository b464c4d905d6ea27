#pragma once
// DeepSpeed's own memory estimators, reproduced with their current formulas
// (deepspeed/runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs and
// deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs), so users coming from
// DeepSpeed can see its figure next to zerolens's full one. DeepSpeed prints these divided by 2^30
// and labels them "GB"; they are GiB.
#include <vector>

#include "sim/config/config.hpp"
#include "sim/core/units.hpp"

namespace zerolens {

struct DeepSpeedEstimate {
  int stage = 2;
  OffloadDevice offload_optimizer = OffloadDevice::None;
  OffloadDevice offload_param = OffloadDevice::None;
  bool zero_init = true;  // stage 3 only
  Bytes cpu_bytes = 0;    // per node, as DeepSpeed defines it
  Bytes gpu_bytes = 0;    // per GPU
};

DeepSpeedEstimate estimate_zero2(Elements total_params, int gpus_per_node, int nodes, bool cpu_offload,
                                 double additional_buffer_factor = 1.5);
DeepSpeedEstimate estimate_zero3(Elements total_params, Elements largest_layer_params,
                                 int gpus_per_node, int nodes, bool cpu_offload,
                                 bool cpu_offload_params, bool zero_init,
                                 double additional_buffer_factor = 1.5);

// The rows DeepSpeed's *_all_cold functions print, in their order.
std::vector<DeepSpeedEstimate> deepspeed_estimate_table(int stage, Elements total_params,
                                                        Elements largest_layer_params,
                                                        int gpus_per_node, int nodes);

}  // namespace zerolens
