#pragma once
// What a ZeRO stage number means: the one place that knows which stage partitions what, where
// gradients are reduced, which offloads it allows and how it is named. Everything else asks these
// questions (of ZeroConfig, ScheduleContext, a trace's run or the executor) instead of comparing
// stage numbers.
#include <string>

namespace zerolens {

// Which states an offload block moves: zero_optimization.offload_optimizer or .offload_param.
enum class OffloadKind { Optimizer, Param };

struct ZeroStage {
  int number = 0;  // 0 (plain data parallelism), 1, 2 or 3

  bool valid() const { return number >= 0 && number <= 3; }

  // DeepSpeed's stages partition state across the data-parallel ranks cumulatively: 1 the
  // optimizer states (and fp32 master weights), 2 also the gradients, 3 also the parameters.
  bool partitions_optimizer_states() const { return number >= 1; }
  bool partitions_gradients() const { return number >= 2; }
  bool partitions_parameters() const { return number >= 3; }
  // Stages 0-1 keep whole gradients through the micro-steps and reduce them once, at the
  // gradient-accumulation boundary; stages 2-3 reduce each bucket as backward fills it.
  bool reduces_at_boundary() const { return !partitions_gradients(); }
  // Stages 1-2 own one flat range of all parameters; stage 3 a slice of every tensor.
  bool uses_flat_partition() const {
    return partitions_optimizer_states() && !partitions_parameters();
  }
  // What the stage adds to the one below: stage 1 partitions the optimizer states only, stage 2
  // the gradients too but not the parameters.
  bool partitions_only_optimizer_states() const {
    return partitions_optimizer_states() && !partitions_gradients();
  }
  bool partitions_gradients_not_parameters() const {
    return partitions_gradients() && !partitions_parameters();
  }
  // Optimizer offload needs partitioned optimizer states (stage 1+), parameter offload
  // partitioned parameters (stage 3).
  bool offload_allowed(OffloadKind kind) const {
    return kind == OffloadKind::Optimizer ? partitions_optimizer_states() : partitions_parameters();
  }

  // DeepSpeed swaps optimizer states to NVMe only in stage 3; stages 1-2 treat "nvme" as "cpu".
  bool swaps_optimizer_to_nvme() const { return partitions_parameters(); }

  // "DP" or "ZeRO-2".
  std::string name() const;
  // "plain data parallelism (ZeRO stage 0)" or "ZeRO stage 2".
  std::string description() const;
};

}  // namespace zerolens
