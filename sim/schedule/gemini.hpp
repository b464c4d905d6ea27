#pragma once
// Gemini: ColossalAI's tensor_placement_policy "auto" (v0.1.5), which moves the parameter shards
// (the StatefulTensors ShardedModelV2 registers: its "chunks" are the shards, one per parameter)
// between the GPU and the host, simulated over the schedule's uses of each layer.
//   gemini/stateful_tensor_mgr.py StatefulTensorMgr.adjust_layout, called by ZeroHook before each
//     module's forward and backward: the module's shards are in COMPUTE state; what of them is on
//     the host is the demand; AutoTensorPlacementPolicy.evict_tensors frees room for it, then the
//     demand is copied to the GPU.
//   gemini/tensor_placement_policy.py AutoTensorPlacementPolicy.evict_tensors: the GPU may hold
//     capacity - non-model bytes of model data (the shards there). In the first (warm-up) step the
//     non-model bytes are 0.8 x the capacity and the shards are evicted in registration order;
//     later steps use 0.9 x the capacity less the non-model peak the warm-up measured for this
//     sampling period (MemStatsCollector.next_period_non_model_data_usage) and evict the shard
//     used farthest ahead first (_sort_hold_cuda_tensors, from the warm-up's compute order). If
//     the held shards cannot free enough ColossalAI raises "Adjust layout failed!".
//   gemini/memory_tracer/memstats_collector.py: a period's non-model bytes are the most allocated
//     during it (max_memory_allocated) less the shards on the GPU when it began.
#include <cstdint>
#include <string>
#include <vector>

#include "sim/core/units.hpp"

namespace zerolens {

// One adjust_layout: a layer's forward or backward use, and the tensors it computes with.
struct GeminiUse {
  std::int32_t layer = -1;
  std::vector<std::int32_t> tensors;  // global tensor ids (COMPUTE)
};

struct GeminiInput {
  std::vector<Bytes> shard_bytes;  // per global tensor
  std::vector<GeminiUse> uses;     // in the step's order
  std::vector<Bytes> non_model;    // per use: the warm-up's non-model peak of its period
  Bytes capacity = 0;              // the GPU's memory (colo_device_memory_capacity)
  bool on_gpu_at_start = true;     // ZeroInitContext builds the shards on the GPU
  // reuse_fp16_shard with offloaded gradients: the step leaves every shard in host memory (the
  // gradient that replaced it is relayed back as the parameter).
  bool shards_to_host_after_step = false;
};

struct GeminiStep {
  std::vector<bool> start_on_gpu;                // per tensor, as the step begins
  std::vector<std::vector<std::int32_t>> evict;  // per use: shards copied to the host first
  std::vector<std::vector<std::int32_t>> fetch;  // per use: the layer's shards copied to the GPU
  Bytes evicted_bytes = 0, fetched_bytes = 0;
  std::string failure;  // non-empty: ColossalAI's "Adjust layout failed!" at a use
};

struct GeminiPlacement {
  GeminiStep warmup;  // the first step, which collects the statistics
  GeminiStep steady;  // a later step, once the placement at the step's start repeats
};

GeminiPlacement simulate_gemini(const GeminiInput& input);

}  // namespace zerolens
