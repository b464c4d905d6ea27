#pragma once
// The engine's checkpoint I/O (internal to exec/): what this rank owns out (fp32 master weights and
// optimizer states by segment, read back from NVMe files where they live there), and on resume its
// new partition cut from whole tensors, whatever the number of ranks that saved them.
#include "exec/engine/optimizer_runner.hpp"
#include "exec/io/checkpoint.hpp"

namespace zerolens::exec {

class CheckpointIo {
 public:
  CheckpointIo(EngineContext& context, ParameterStore& params, OptimizerRunner& optimizer,
               NvmeSwapper& nvme);

  CheckpointMeta meta() const;
  RankShard shard();
  // Throws CheckpointError when the checkpoint is of another model or optimizer; shard() and
  // restore() throw InputError (--ep) with expert parallelism.
  void restore(const FullState& state);

 private:
  void require_no_experts() const;
  Numbers master_weights(const OwnedSegment& segment);
  void restore_optimizer(const FullState& state);

  EngineContext& ctx_;
  ParameterStore& params_;
  OptimizerRunner& optimizer_;
  NvmeSwapper& nvme_;
};

}  // namespace zerolens::exec
