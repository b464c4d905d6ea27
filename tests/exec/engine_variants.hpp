#pragma once
// Plans of the toy model (toy_model.hpp) in every precision and offload setting, for the engine's
// mixed-precision and offload tests under mpirun.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "exec/engine/zero_engine.hpp"
#include "toy_model.hpp"

namespace zerolens::testing {

inline exec::Communicator& world_communicator() {
  static const std::unique_ptr<exec::Communicator> communicator = exec::make_mpi_communicator();
  return *communicator;
}

// To the host (cpu) or to NVMe files under a temporary directory of this job.
enum class Offload { None, Optimizer, OptimizerAndParams, NvmeOptimizer, NvmeOptimizerAndParams };

inline bool to_nvme(Offload offload) {
  return offload == Offload::NvmeOptimizer || offload == Offload::NvmeOptimizerAndParams;
}

// One directory per job: the ctest jobs at 1, 2 and 4 ranks, and other ctest runs, may run at once
// (ranks of one job share their parent, mpirun, and keep apart in the directory by rank).
inline std::string test_nvme_path(const std::string& test, int ranks) {
  return (std::filesystem::temp_directory_path() /
          (test + "-nvme-np" + std::to_string(ranks) + "-" + std::to_string(::getppid())))
      .string();
}

struct Variant {
  int stage = 0;
  Precision precision = Precision::Fp32;
  Offload offload = Offload::None;
  std::int64_t grad_accumulation = 1;
  int scale_power = 8;      // fp16 dynamic loss scale 2^8: the toy's gradients do not overflow
  double static_scale = 0;  // fp16 "loss_scale" (0: dynamic)
  int hysteresis = 2;
  double clipping = 0;
  std::int64_t sub_group_size = 0;  // zero_optimization.sub_group_size (0: the config's)
};

inline std::string name_of(const Variant& v) {
  const char* offload[] = {"", " offload optimizer", " offload optimizer+params", " nvme optimizer",
                           " nvme optimizer+params"};
  return "stage " + std::to_string(v.stage) + " " + to_string(v.precision) +
         offload[int(v.offload)] + " ga " + std::to_string(v.grad_accumulation) +
         (v.clipping > 0 ? " clip" : "");
}

inline const ToyShape kVariantShape{4, 8};

inline Plan variant_plan(const Variant& v, int ranks) {
  PlanRequest request;
  request.model = toy_sim_model(kVariantShape);
  TrainingConfig& c = request.config;
  c.zero.stage = v.stage;
  c.precision.precision = v.precision;
  c.precision.loss_scale.initial_scale_power = v.scale_power;
  c.precision.loss_scale.static_loss_scale = v.static_scale;
  c.precision.loss_scale.hysteresis = v.hysteresis;
  c.precision.loss_scale.loss_scale_window = 1000;
  const OffloadDevice host = to_nvme(v.offload) ? OffloadDevice::Nvme : OffloadDevice::Cpu;
  if (v.offload != Offload::None) c.zero.offload_optimizer.device = host;
  if (v.offload == Offload::OptimizerAndParams || v.offload == Offload::NvmeOptimizerAndParams) {
    c.zero.offload_param.device = host;
  }
  if (to_nvme(v.offload)) {
    c.zero.offload_optimizer.nvme_path = c.zero.offload_param.nvme_path =
        test_nvme_path("zerolens-toy", ranks);
    c.zero.sub_group_size = 50;             // several sub-groups swapped one after another
    c.zero.offload_param.buffer_size = 40;  // layers and tensors share the swap buffers in turn
  }
  if (v.sub_group_size > 0) c.zero.sub_group_size = v.sub_group_size;
  c.batch.micro_batch_per_gpu = 2;
  c.batch.gradient_accumulation_steps = v.grad_accumulation;
  c.seq_len = 1;
  c.zero.reduce_bucket_size = 40;                 // several buckets, some splitting partitions
  c.zero.allgather_bucket_size = 30;              // several all-gather shards in stages 1-2
  c.zero.stage3_param_persistence_threshold = 8;  // biases stay whole (gathered after the step)
  c.zero.stage3_max_reuse_distance = 0;
  c.optimizer.type = OptimizerType::AdamW;
  c.optimizer.lr = 0.01;
  c.optimizer.weight_decay = 0.01;
  c.gradient_clipping = v.clipping;
  request.dp_size = ranks;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), ranks, 8);
  return make_plan(request);
}

}  // namespace zerolens::testing
