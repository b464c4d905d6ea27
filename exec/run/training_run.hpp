#pragma once
// A training run as `zerolens run` and `zerolens validate` do it: GPT-2 on the synthetic corpus,
// trained by the ZeRO engine for N steps on this rank, with every op timed and the memory after
// every op recorded; the result is what this rank measured (ranks are symmetric: partitions are
// padded to equal sizes, so rank 0 stands for all, as in the schedule).
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "exec/comm/communicator.hpp"
#include "exec/engine/zero_engine.hpp"
#include "exec/model/gpt2_model.hpp"
#include "sim/plan/plan.hpp"
#include "sim/schedule/memory_replay.hpp"
#include "sim/trace/trace.hpp"

namespace zerolens::exec {

// Builds the GPT-2 the engine trains, its activations charged to the ledger: the CPU Gpt2Model
// by default, a CUDA one (exec/cuda) where the communicator's memory space is a GPU's.
using Gpt2Factory = std::function<std::unique_ptr<LayerModel>(const Model&, const Gpt2Options&, MemoryLedger&)>;

struct TrainingOptions {
  int steps = 20;             // train until this many optimizer steps have been taken in all
  std::uint64_t seed = 1234;  // data and initial weights
  std::string save_directory;  // checkpoints (exec/io/checkpoint.hpp), none when empty
  int save_every = 0;          // steps between checkpoints (0: only after the last step)
  std::string resume_from;     // a checkpoint directory to start from (any number of ranks saved it)
  Gpt2Factory make_model;      // empty: the CPU Gpt2Model
};

struct StepRecord {
  std::int64_t step = 0;
  double loss = 0, grad_norm = 0, seconds = 0;
  double loss_scale = 1;  // the fp16 loss scale this step used (1 otherwise)
  bool skipped = false;   // fp16 overflow: no update
};

struct OpRecord {
  double start = 0, duration = 0;                  // seconds from the step's start
  std::array<Bytes, kDeviceCount> memory_after{};  // this rank's ledger after the op
};

inline constexpr std::size_t kStepWindow = 8;

struct StepStretch {
  double seconds = 0;     // mean step time over the stretch
  std::size_t first = 0;  // index in TrainingResult::steps of its first step
  std::size_t count = 0;  // steps in it
  std::size_t step = 0;   // index of the step whose ops are recorded
};

struct TrainingResult {
  std::int64_t first_step = 0;  // 0, or the step a checkpoint resumed from
  int pipeline_stage = 0;       // the stage this rank ran (its schedule's ops are recorded)
  std::vector<StepRecord> steps;
  std::vector<std::string> checkpoints;  // step directories written
  // The step time the run reports: the lowest mean over kStepWindow consecutive steps (all of them
  // when fewer ran), leaving out the first step when others follow (it pays for first touches of
  // memory). On a machine whose speed varies (a shared host's other work, ranks sharing cores) a
  // stretch of fast steps is the reproducible figure, as calibrate keeps its best runs; a mean over
  // consecutive steps, unlike one step, cannot borrow time its peers pay back in the next step.
  StepStretch recorded;
  std::vector<OpRecord> recorded_ops;  // the ops of the stretch's step nearest its mean
  std::array<Bytes, kDeviceCount> peak{};                // highest over all steps, per device
  std::array<CategoryBytes, kDeviceCount> at_peak{};     // categories when that peak was reached
  std::array<CategoryBytes, kDeviceCount> category_high{};  // the highest each category reached
  // Of one step (the last), per group: data-parallel (the shard group under hybrid sharding),
  // tensor-parallel, between pipeline stages (their sends and receives and the tied embedding's
  // all-reduce), hybrid sharding's replicate group and hpZ's secondary group.
  std::array<CollectiveCount, kOpKindCount> collectives{};
  std::array<CollectiveCount, kOpKindCount> tensor_parallel_collectives{};
  std::array<CollectiveCount, kOpKindCount> pipeline_collectives{};
  std::array<CollectiveCount, kOpKindCount> replicate_collectives{};
  std::array<CollectiveCount, kOpKindCount> hpz_collectives{};
  // ZeRO++ qgZ's all-to-all hops, among a node's ranks and across nodes.
  std::array<CollectiveCount, kOpKindCount> node_collectives{}, cross_node_collectives{};
  // Expert parallelism: the EP group's (the model's all-to-alls) and the expert-data-parallel
  // group's (the expert parameters' reductions, gathers and norm).
  std::array<CollectiveCount, kOpKindCount> expert_parallel_collectives{},
      expert_data_collectives{};
  LinkBytes links;  // host-device copies and NVMe transfers of one step (the last)
};

// The engine's device buffers go where the communicator reads them (Communicator::memory_space:
// host memory for MPI, the GPU's memory for NCCL).
// Runs the steps of `plan` up to `options.steps`, from the start or from a checkpoint (whose model
// must be a GPT-2 the executor runs and whose dp size must equal comm.size()). `on_step` sees each
// step as it ends. Throws InputError, and CheckpointError for a checkpoint that cannot be written
// or read. Throws the InputError train_gpt2 would for a model the executor cannot train (not
// GPT-2's architecture, a sequence beyond its positions), before anything runs or is printed.
void check_trainable(const Plan& plan);
// Everything the run refuses of `plan` before it starts, checked alone so that a caller can refuse
// before it prints anything: check_trainable, `processes` not the plan's ranks (ProcessGroups),
// what the engine does not run (check_engine_supports), checkpoints of TP or PP runs.
void check_runnable(const Plan& plan, const TrainingOptions& options, int processes);

TrainingResult train_gpt2(const Plan& plan, Communicator& comm, const TrainingOptions& options,
                          const std::function<void(const StepRecord&)>& on_step = {});

// The measured step in the shared trace schema (source "exec", rank 0): the recorded step's ops
// with their measured times and memory, the recorded stretch's step time and its throughput, and
// the peaks over all steps. A pipeline stage other than the plan's (the one with the most memory)
// is traced against its own schedule.
Trace measured_trace(const Plan& plan, const TrainingResult& result);

// The rank whose measurement a run reports and validate compares: the first rank of the pipeline
// stage the plan reports (the one with the most GPU memory); rank 0 without pipeline parallelism.
int recording_rank(const Plan& plan);

}  // namespace zerolens::exec
