#pragma once
// What every component of the ZeRO engine reads (internal to exec/): the plan, this rank's place in
// it and the elements it owns, and the bytes the components move over host links.
#include <array>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "exec/comm/communicator.hpp"
#include "exec/comm/process_groups.hpp"
#include "exec/engine/zero_engine.hpp"
#include "exec/memory/memory_ledger.hpp"
#include "exec/memory/numbers.hpp"
#include "sim/plan/plan.hpp"

namespace zerolens::exec {

// A run of elements of one tensor whose optimizer state this rank owns.
struct OwnedSegment {
  std::int32_t tensor = 0;
  Elements begin = 0;  // first element within the tensor
  Elements length = 0;
  Elements owned_offset = 0;  // position in the owned gradient partition and optimizer states
  bool operator==(const OwnedSegment&) const = default;
};

// A run [owned_offset, owned_offset + length) of the owned gradient partition.
struct OwnedRun {
  Elements owned_offset = 0, length = 0;
};

// Expert parallelism (sim's ParamLayout::tensor_expert): an expert tensor is data-parallel over the
// expert-data-parallel group, the others over the data-parallel group. As DeepSpeed keeps the
// expert parameters in param groups of their own (moe/utils.py
// split_params_into_different_moe_groups_for_optimizer) partitioned over their group
// (stage_1_and_2.py _configure_moe_settings: real_dp_process_group), the tensors of each kind make
// a flat order of their own (a "space"), partitioned over its own ranks; the owned partition is
// the non-expert space's part followed by the expert space's.
bool is_expert(const ParamLayout& layout, std::size_t tensor);

// Where each tensor starts in its space's flat order (the experts' own, or the others') and in the
// concatenated stage-3 partitions.
struct TensorOffsets {
  std::vector<Elements> flat, partition;
};
TensorOffsets tensor_offsets(const ParamLayout& layout);

// Where the expert space's owned elements start in the owned partition: after the non-expert
// space's (stage 0: all its elements; stages 1-2: its flat partition; stage 3 places every
// tensor's partition by TensorOffsets::partition). 0 for the non-expert space.
Elements owned_base(const ParamLayout& layout, ZeroStage stage, bool expert);

// The segments a rank owns (`rank` its place in the data-parallel group, `expert_rank` in the
// expert-data-parallel group; without expert parallelism the same): stage 0 everything; stages 1-2
// the range [rank x P, (rank + 1) x P) of each space's flat order (P: its flat partition); stage 3
// the rank-th partition of every tensor (an expert's over its group).
std::vector<OwnedSegment> owned_segments(const ParamLayout& layout, ZeroStage stage, int rank,
                                         int expert_rank);
inline std::vector<OwnedSegment> owned_segments(const ParamLayout& layout, ZeroStage stage,
                                                int rank) {
  return owned_segments(layout, stage, rank, rank);
}

// One space's ranks: the communicator its collectives run over, their count, this rank's place,
// the space's flat partition (stages 1-2) and where its owned elements start.
struct ParamSpace {
  Communicator* comm = nullptr;
  int ranks = 1, rank = 0;
  Elements flat_partition = 0;
  Elements owned_base = 0;
};

// The part of `segment` inside owned elements [begin, end), or an empty segment.
OwnedSegment clip(const OwnedSegment& segment, Elements begin, Elements end);

// What this rank runs of a plan: the schedule and model of its pipeline stage (the plan's own
// without pipeline parallelism), the model being its tensor-parallel shard.
const Schedule& rank_schedule(const Plan& plan, int stage);
const Model& rank_model(const Plan& plan, int stage);

struct EngineContext {
  // Data parallelism alone: `comm` is the data-parallel group.
  EngineContext(const Plan& plan, Communicator& comm, MemoryLedger& ledger);
  EngineContext(const Plan& plan, std::shared_ptr<const ProcessGroups> groups,
                MemoryLedger& ledger);
  EngineContext(Plan&&, Communicator&, MemoryLedger&) = delete;

  std::size_t owner_of(std::size_t layer) const;  // the layer whose parameters `layer` uses
  std::pair<std::int32_t, std::int32_t> tensors_of_layer(std::size_t owner) const;
  bool host_optimizer() const { return optimizer_device != Device::Gpu; }
  const TrainingConfig& config() const { return plan.request.config; }

  std::shared_ptr<const ProcessGroups> groups;  // this rank's TP, DP and pipeline groups
  const Plan& plan;
  const Schedule& schedule;
  const Model& model;
  const ParamLayout& layout;
  // The ranks stage 3 partitions over, on which the schedule's Data-group ops run (the
  // data-parallel group, or the shard group under hybrid sharding), their count and this rank's
  // place in them.
  Communicator& comm;
  MemoryLedger& ledger;
  ZeroStage stage;  // what this stage partitions (sim/config/zero_stage.hpp)
  int dp = 1, rank = 0;
  // The whole data-parallel group (dp x its replicas under hybrid sharding), this rank's place
  // in it: what the batch is split over and the gradients are averaged over.
  int data_parallel = 1, data_rank = 0;
  NumberFormat param_format = NumberFormat::Fp32, grad_format = NumberFormat::Fp32;
  bool mixed = false;       // 16-bit parameters and gradients
  bool has_master = false;  // an fp32 master partition besides the parameters: mixed precision, or
                            // a host optimizer with the parameters on the device (fp32 too)
  Device optimizer_device = Device::Gpu, param_device = Device::Gpu;
  // The schedule copies the host-updated parameters to the device after the step (CopyH2D);
  // otherwise (parameters offloaded, or ColossalAI's shards left on the host) they are updated
  // where they are.
  bool writes_back_params = false;
  // The two spaces: [0] the non-expert tensors' (over `comm`), [1] the experts' (over the
  // expert-data-parallel group; ranks 0 without expert parallelism).
  std::array<ParamSpace, 2> spaces;
  bool expert(std::size_t tensor) const { return is_expert(layout, tensor); }
  const ParamSpace& space_of(std::size_t tensor) const { return spaces[expert(tensor) ? 1 : 0]; }
  // The space of a collective: the expert one for an op over the ExpertData group.
  const ParamSpace& space_of(const Op& op) const {
    return spaces[op.group == ProcessGroup::ExpertData ? 1 : 0];
  }
  TensorOffsets offsets;
  std::vector<OwnedSegment> segments;
  LinkBytes copied;  // counted by whichever component moves the bytes
  // Per tensor (the layout's numbering): whether this rank adds it into the gradient norm (a
  // tensor TP splits on every rank, one it replicates on TP rank 0 only), and whether its
  // gradient is summed over the TP group once per step (SP: sim's sequence_parallel_grad).
  std::vector<bool> counted_in_norm, sequence_parallel_grad;
};

}  // namespace zerolens::exec
