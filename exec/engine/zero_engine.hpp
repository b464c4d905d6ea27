#pragma once
// The ZeRO engine: runs one training step by executing the simulator's schedule op by op on this
// rank. Stage 0 keeps everything replicated and all-reduces gradients; stages 1-2 own a flat
// partition of the optimizer states (and, in stage 2, of the gradients) and all-gather updated
// parameters; stage 3 also partitions every parameter tensor and gathers a layer's tensors before
// use. Which collective runs when, over which bytes, is the schedule's decision, never the
// engine's.
//
// Mixed precision (fp16, bf16): parameters and gradients are held in 16 bits (grad_accum_dtype fp32
// keeps fp32 gradients), the optimizer updates an fp32 master partition and writes the 16-bit
// parameters back; collectives move the 16-bit bytes. fp16 scales the loss
// (exec/engine/loss_scaler.hpp), checks the owned gradients for inf/NaN (the schedule's
// OverflowCheck: a one-byte all-reduce; stage 0 checks its all-reduced gradients locally) and skips
// an overflowing step as DeepSpeed does: no norm, no update, no write-back or all-gather of
// parameters, gradients freed all the same. The model computes in fp32 (LayerModel), so the engine
// hands it an fp32 copy of one layer's parameters (and, in backward, of its gradients, cast back to
// 16 bits after). That copy is the CPU backend's working memory, not a plan component: the ledger
// counts it as scratch (MemoryLedger::scratch_peak), apart from the figures compared with the plan;
// at most one layer's parameters and gradients at a time.
//
// Offload to the host (ledger device Cpu): optimizer offload keeps the fp32 master, optimizer
// states and an fp32 gradient partition on the host; each reduced bucket's owned gradients cross
// to it (the schedule's CopyD2H), the multi-threaded host Adam updates there and the new 16-bit
// parameters cross back (CopyH2D). Parameter offload (stage 3) keeps the parameter partitions on
// the host and copies a layer's partition to the device before its all-gather. The engine counts
// the bytes it copies per link (link_bytes()).
//
// NVMe offload (ZeRO-Infinity, files under nvme_path through exec/io/nvme_io.hpp): the optimizer's
// master and states live in one file per sub-group and are swapped through the host swap buffers
// at the schedule's NvmeRead / OptimizerStep / NvmeWrite; stage-3 parameters live in one file per
// tensor partition, read before a layer's CopyH2D and written back as the update produces them.
// In fp32 with only the optimizer offloaded the host optimizer updates its own fp32 master (the
// plan's), with the parameters offloaded too it updates them in place.
// Tensor and pipeline parallelism (docs/executor.md): ZeRO runs over the rank's data-parallel
// group (ProcessGroups); the model is the rank's TP shard of its pipeline stage, whose layers run
// the TP collectives as the schedule's TP ops (TensorParallelOps); the schedule's Send and Recv
// ops move activations and gradients between stages (PipelineTransfers); the SP gradients, the
// tied embedding's copies, the norm and the overflow flag are reduced over the groups the
// schedule names.
// Hybrid sharding (MiCS): stage 3 partitions over the rank's shard group, on which the schedule's
// Data-group ops run, and each bucket's accumulated gradient partition is all-reduced over the
// replicate group at the step's last micro-step (the schedule's Replicate ops). ZeRO++ hpZ: a
// layer's first release of a step keeps this rank's secondary partition (1/hpz of the gathered
// tensors), later gathers of that step run over the hpZ group from it (the schedule's Secondary
// ops), and the update drops it.
// Expert parallelism (sim's ParamLayout::tensor_expert, ProcessGroups::expert_data): the expert
// tensors make a flat order and an owned partition of their own, partitioned (stages 1-2) or
// split per tensor (stage 3) over the expert-data-parallel group, on which the schedule's
// ExpertData ops reduce their gradients (averaged over that group) and gather their updates; the
// norm is the DP group's sum of both kinds' squares, averaged over the expert-data group as
// DeepSpeed does. Refused with InputError (--ep): with TP, PP, hybrid sharding, hpZ, ZeRO++'s
// quantized collectives, ColossalAI, the delayed update, and in checkpoints; at stage 0 fp16 and
// gradient clipping.
// Refused with InputError: fp32 with offloaded parameters and NVMe, cpu_checkpointing, parameter
// offload with the optimizer on the device (the plan has no copy of updated parameters back to
// the host), swap buffers too small for a sub-group or a layer.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "exec/comm/communicator.hpp"
#include "exec/comm/process_groups.hpp"
#include "exec/engine/optimizer.hpp"
#include "exec/io/checkpoint.hpp"
#include "exec/memory/memory_ledger.hpp"
#include "exec/model/layer_model.hpp"
#include "sim/plan/plan.hpp"

namespace zerolens::exec {

// What the engine's constructor refuses of a plan whatever the ranks running it (InputError),
// checked alone: a run refuses before it prints anything.
void check_engine_supports(const Plan& plan);

struct StepReport {
  double loss = 0;        // mean over the global batch
  double grad_norm = 0;   // of the averaged gradient, before clipping (0 on a skipped step)
  double loss_scale = 1;  // the fp16 loss scale this step's backward used (1 otherwise)
  bool skipped = false;   // fp16 overflow: no update this step
};

// A test hook: +inf written into one gradient element on one rank in one step (after that rank's
// backward of the layer owning the tensor, first micro-step), as an fp16 overflow would.
struct GradientFault {
  std::int64_t step = 0;
  int rank = 0;
  std::int32_t tensor = 0;
  Elements element = 0;
};

struct EngineOptions {
  std::vector<GradientFault> inject_inf;
};

// Bytes this rank moved between host and device, and between host and NVMe files, since the
// engine started (the schedule's copies and NVMe ops; not checkpoints or initialisation).
struct LinkBytes {
  Bytes pcie_h2d = 0;
  Bytes pcie_d2h = 0;
  Bytes nvme_read = 0;
  Bytes nvme_write = 0;
};

// Hybrid sharding and hpZ where the engine runs them (stage 3 over data parallelism alone; hybrid
// sharding with the optimizer and parameters on the device): InputError naming --shard-group or
// --hpz otherwise. The engine checks it; a command may call it before anything runs.
void require_runnable_sharding(const Plan& plan);

// Called after every op with its index in the schedule and its start/end in seconds from the step's start.
using OpCallback = std::function<void(std::size_t op, double start, double end)>;

class ZeroEngine {
 public:
  // Throws InputError for what this executor does not run (see above).
  // The engine keeps a reference to `plan`, which must outlive it (hence no temporaries).
  ZeroEngine(const Plan& plan, Communicator& comm, LayerModel& model, MemoryLedger& ledger,
             const EngineOptions& options = {});
  // With tensor (and pipeline) parallelism: this rank's groups, split off the world by sim's
  // placement (ProcessGroups); `model` is this rank's shard of its stage, its TP collectives run
  // through the engine (LayerModel::connect_tensor_parallel).
  ZeroEngine(const Plan& plan, std::shared_ptr<const ProcessGroups> groups, LayerModel& model,
             MemoryLedger& ledger, const EngineOptions& options = {});
  ZeroEngine(Plan&& plan, Communicator& comm, LayerModel& model, MemoryLedger& ledger,
             const EngineOptions& options = {}) = delete;
  ~ZeroEngine();
  ZeroEngine(const ZeroEngine&) = delete;
  ZeroEngine& operator=(const ZeroEngine&) = delete;

  StepReport step(std::int64_t step_index, const OpCallback& on_op = {});
  // Every parameter, whole, in tensor order (a collective in stage 3: all ranks must call it).
  std::vector<float> full_parameters();
  LinkBytes link_bytes() const;
  // ZeRO++ qgZ's node and cross-node groups, split off the data-parallel group (nullptr without
  // qgZ, and the cross-node one on a single node): their collectives are counted apart.
  const Communicator* node_group() const;
  const Communicator* cross_node_group() const;
  double loss_scale() const;  // the scale the next step will use

  // Checkpoints: what this rank owns (fp32 master weights and optimizer states by segment, the
  // optimizer's step count) and, on resume, its new partition cut from whole tensors, whatever
  // the number of ranks that saved them. restore() throws CheckpointError when the checkpoint is
  // of another model or optimizer.
  CheckpointMeta checkpoint_meta() const;
  RankShard checkpoint_shard() const;
  void restore(const FullState& state);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace zerolens::exec
