#pragma once
// What every component of the ZeRO engine reads (internal to exec/): the plan, this rank's place in
// it and the elements it owns, and the bytes the components move over host links.
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

// Where each tensor starts in the flat parameter order and in the concatenated stage-3 partitions.
struct TensorOffsets {
  std::vector<Elements> flat, partition;
};
TensorOffsets tensor_offsets(const ParamLayout& layout);

// The segments `rank` owns: stage 0 everything; stages 1-2 the flat range [rank x P, (rank + 1) x
// P); stage 3 the rank-th partition of every tensor.
std::vector<OwnedSegment> owned_segments(const ParamLayout& layout, ZeroStage stage, int rank);

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
  TensorOffsets offsets;
  std::vector<OwnedSegment> segments;
  LinkBytes copied;  // counted by whichever component moves the bytes
  // Per tensor (the layout's numbering): whether this rank adds it into the gradient norm (a
  // tensor TP splits on every rank, one it replicates on TP rank 0 only), and whether its
  // gradient is summed over the TP group once per step (SP: sim's sequence_parallel_grad).
  std::vector<bool> counted_in_norm, sequence_parallel_grad;
};

}  // namespace zerolens::exec
