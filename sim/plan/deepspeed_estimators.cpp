#include "sim/plan/deepspeed_estimators.hpp"

#include <algorithm>
#include <cmath>

namespace zerolens {
namespace {

// Python's int() of a float product, as DeepSpeed computes it.
Bytes truncate(double value) { return Bytes(std::trunc(value)); }

}  // namespace

DeepSpeedEstimate estimate_zero2(Elements total_params, int gpus_per_node, int nodes, bool cpu_offload,
                                 double additional_buffer_factor) {
  const double params = double(total_params);
  const int total_gpus = nodes * gpus_per_node;
  DeepSpeedEstimate estimate;
  estimate.stage = 2;
  estimate.offload_optimizer = cpu_offload ? OffloadDevice::Cpu : OffloadDevice::None;
  if (cpu_offload) {
    estimate.gpu_bytes = 2 * total_params;
    estimate.cpu_bytes =
        truncate(params * std::max(4.0 * total_gpus, 16.0) * additional_buffer_factor);
  } else {
    estimate.gpu_bytes = 2 * total_params + truncate(18.0 * params / total_gpus);
    estimate.cpu_bytes = truncate(params * 4.0 * gpus_per_node * additional_buffer_factor);
  }
  return estimate;
}

DeepSpeedEstimate estimate_zero3(Elements total_params, Elements largest_layer_params,
                                 int gpus_per_node, int nodes, bool cpu_offload,
                                 bool cpu_offload_params, bool zero_init,
                                 double additional_buffer_factor) {
  const double params = double(total_params);
  const int total_gpus = nodes * gpus_per_node;
  const double gpus_factor = 1.0 / nodes;
  const Bytes largest_layer_memory = 4 * largest_layer_params;
  DeepSpeedEstimate estimate;
  estimate.stage = 3;
  estimate.offload_optimizer = cpu_offload ? OffloadDevice::Cpu : OffloadDevice::None;
  estimate.offload_param = cpu_offload_params ? OffloadDevice::Cpu : OffloadDevice::None;
  estimate.zero_init = zero_init;
  const double factor = additional_buffer_factor;
  if (cpu_offload && cpu_offload_params) {
    estimate.gpu_bytes = largest_layer_memory;
    estimate.cpu_bytes = zero_init ? truncate(params * 18 * gpus_factor * factor)
                                   : truncate(params * std::max(4.0 * gpus_per_node, 18 * gpus_factor) * factor);
  } else if (cpu_offload) {
    estimate.gpu_bytes = largest_layer_memory + truncate(2.0 * params / total_gpus);
    estimate.cpu_bytes = zero_init ? truncate(params * 16 * gpus_factor * factor)
                                   : truncate(params * std::max(4.0 * gpus_per_node, 16 * gpus_factor) * factor);
  } else {
    estimate.gpu_bytes = largest_layer_memory + truncate(18.0 * params / total_gpus);
    estimate.cpu_bytes = zero_init ? truncate(double(largest_layer_params) * 4 * gpus_per_node * factor)
                                   : truncate(params * 4 * gpus_per_node * factor);
  }
  return estimate;
}

std::vector<DeepSpeedEstimate> deepspeed_estimate_table(int stage, Elements total_params,
                                                        Elements largest_layer_params,
                                                        int gpus_per_node, int nodes) {
  std::vector<DeepSpeedEstimate> rows;
  if (!ZeroStage{stage}.partitions_parameters()) {  // estimate_zero2
    for (const bool cpu_offload : {true, false}) {
      rows.push_back(estimate_zero2(total_params, gpus_per_node, nodes, cpu_offload));
    }
    return rows;
  }
  for (const bool cpu_offload : {true, false}) {
    for (const bool offload_params : {true, false}) {
      if (!cpu_offload && offload_params) continue;
      for (const bool zero_init : {true, false}) {
        rows.push_back(estimate_zero3(total_params, largest_layer_params, gpus_per_node, nodes,
                                      cpu_offload, offload_params, zero_init));
      }
    }
  }
  return rows;
}

}  // namespace zerolens
