#pragma once
// gpt2-tiny plans for the engine's GPT-2 tests (CPU backend under mpirun, and the CUDA backend's
// under tests/exec/cuda): every stage, precision, offload and NVMe setting.
#include <unistd.h>

#include <filesystem>
#include <string>

#include "moe_gpt2_support.hpp"
#include "sim/model/presets.hpp"
#include "sim/plan/plan.hpp"

namespace zerolens::testing {

struct Gpt2Setup {
  int stage = 0;
  std::int64_t micro_batch = 4, seq_len = 32, grad_accumulation = 1;
  bool checkpointing = false;
  Precision precision = Precision::Fp32;
  bool offload_optimizer = false, offload_param = false;  // to the host (cpu)
  bool nvme = false;                                      // offload to NVMe files instead
  bool pipelined = false;   // NVMe: pipeline_read and pipeline_write, buffers for two sub-groups
  int tensor_parallel = 1;  // ranks of a TP group (the data-parallel ranks are the rest)
  bool sequence_parallel = false;
  int pipeline_stages = 1;
  int shard_group = 0;  // hybrid sharding: ranks stage 3 partitions over (0: every DP rank)
  int hpz = 1;          // ZeRO++ hpZ: ranks of a secondary partition group (1: off)
  bool quantized_weights = false, quantized_gradients = false;  // ZeRO++ qwZ, qgZ (stage 3)
  int gpus_per_node = 8;                                        // the cluster's: qgZ's nodes
  int virtual_stages = 1;  // model chunks per stage: above 1 the interleaved 1F1B schedule
  int blocks = 2;          // gpt2-tiny's 2, or more (PP x virtual stages must divide them)
  // SGD with momentum updates in proportion to the gradients (Adam's updates of a near-zero
  // gradient are its sign): the parameter parity tests use it.
  OptimizerType optimizer = OptimizerType::AdamW;
  bool moe = false;         // gpt2-tiny-moe (tests/exec/moe_gpt2_support.hpp) instead of gpt2-tiny
  int expert_parallel = 1;  // with moe: EP group size (capacity factor 2: no token dropped)
};

// " v 2 4 blocks": appended piece by piece (GCC 12's -Wrestrict misfires on the one expression).
inline std::string chunks_and_blocks(const Gpt2Setup& s) {
  std::string text;
  if (s.virtual_stages > 1) text.append(" v ").append(std::to_string(s.virtual_stages));
  if (s.blocks != 2) text.append(" ").append(std::to_string(s.blocks)).append(" blocks");
  return text;
}

inline std::string name_of(const Gpt2Setup& s) {
  std::string zeropp = s.quantized_weights ? " qwZ" : "";
  if (s.quantized_gradients) zeropp += " qgZ";
  if (s.gpus_per_node != 8)
    zeropp.append(" ").append(std::to_string(s.gpus_per_node)).append(" per node");
  return "stage " + std::to_string(s.stage) + " " + to_string(s.precision) +
         (s.checkpointing ? " ckpt" : "") + (s.offload_optimizer ? " offload optimizer" : "") +
         (s.offload_param ? " offload params" : "") + (s.nvme ? " to nvme" : "") +
         (s.pipelined ? " pipelined" : "") +
         (s.tensor_parallel > 1 ? " tp " + std::to_string(s.tensor_parallel) : "") +
         (s.sequence_parallel ? " sp" : "") +
         (s.pipeline_stages > 1 ? " pp " + std::to_string(s.pipeline_stages) : "") +
         (s.shard_group > 0 ? " shard group " + std::to_string(s.shard_group) : "") +
         (s.hpz > 1 ? " hpz " + std::to_string(s.hpz) : "") + zeropp + chunks_and_blocks(s) +
         (s.moe ? " moe" : "") +
         (s.expert_parallel > 1 ? " ep " + std::to_string(s.expert_parallel) : "");
}

inline Model tiny_gpt2(int blocks = 2) {
  TransformerShape shape = *model_from_preset("gpt2-tiny").shape;
  shape.dropout = 0;  // the executor trains without dropout
  shape.layers = blocks;
  return build_transformer("gpt2-tiny", shape);
}

// The CPU backend has no CUDA context, library workspaces or caching allocator. `ranks`: the
// job's (data x tensor x pipeline parallel).
inline Plan gpt2_plan(const Gpt2Setup& s, int ranks) {
  PlanRequest request;
  request.model = s.moe ? tiny_moe_gpt2() : tiny_gpt2(s.blocks);
  TrainingConfig& c = request.config;
  c.zero.stage = s.stage;
  c.precision.precision = s.precision;
  // DeepSpeed's default 2^16 overflows in some steps of some stages and not others (stage 0 sums
  // the micro-steps before averaging over ranks, stage 2 after): 2^8 keeps every step.
  c.precision.loss_scale.initial_scale_power = 8;
  const OffloadDevice host = s.nvme ? OffloadDevice::Nvme : OffloadDevice::Cpu;
  if (s.offload_optimizer) c.zero.offload_optimizer.device = host;
  if (s.offload_param) c.zero.offload_param.device = host;
  if (s.nvme) {
    c.zero.offload_optimizer.nvme_path = c.zero.offload_param.nvme_path =
        (std::filesystem::temp_directory_path() /
         ("zerolens-gpt2-nvme-np" + std::to_string(ranks) + "-" + std::to_string(::getppid())))
            .string();
    c.zero.sub_group_size = 30000;  // several sub-groups
    c.zero.offload_param.buffer_size =
        20000;  // 5 x 20000: a block's partition (~50k at 1 rank) fits
    c.zero.offload_optimizer.pipeline_read = c.zero.offload_optimizer.pipeline_write = s.pipelined;
    if (s.pipelined) c.zero.offload_optimizer.buffer_count = 8;  // two sub-groups of 4 buffers
  }
  c.batch.micro_batch_per_gpu = s.micro_batch;
  c.batch.gradient_accumulation_steps = s.grad_accumulation;
  c.seq_len = s.seq_len;
  c.zero.reduce_bucket_size = 20000;  // several buckets for this ~100k-parameter model
  c.zero.allgather_bucket_size = 30000;
  c.zero.stage3_param_persistence_threshold = 100;
  c.activation_checkpointing.enabled = s.checkpointing;
  c.optimizer.type = s.optimizer;
  c.optimizer.lr = s.optimizer == OptimizerType::Sgd ? 0.1 : 3e-3;
  if (s.optimizer == OptimizerType::Sgd) c.optimizer.momentum = 0.9;
  c.optimizer.weight_decay = 0.01;
  c.tensor_parallel = {.size = s.tensor_parallel, .sequence_parallel = s.sequence_parallel};
  c.pipeline.size = s.pipeline_stages;
  c.zero.shard_group_size = s.shard_group;
  c.zero.hpz_partition_size = s.hpz;
  c.pipeline.virtual_stages = s.virtual_stages;
  if (s.virtual_stages > 1) c.pipeline.schedule = PipelineSchedule::Interleaved;
  request.dp_size = ranks / (s.tensor_parallel * s.pipeline_stages);
  c.zero.quantized_weights = s.quantized_weights;
  c.zero.quantized_gradients = s.quantized_gradients;
  if (s.expert_parallel > 1)
    c.expert_parallel = {.size = s.expert_parallel, .capacity_factor = 2.0, .min_capacity = 0};
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), ranks, s.gpus_per_node);
  request.options.cuda_context_bytes = 0;
  request.options.library_workspace_bytes = 0;
  request.options.allocator = AllocatorSpec{.kind = AllocatorKind::Flat};
  return make_plan(request);
}

}  // namespace zerolens::testing
