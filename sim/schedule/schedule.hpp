#pragma once
// The schedule: the ordered ops of one training step (all micro-steps) for one representative rank.
// It is produced once and consumed by everything: the memory report (peak = maximum of the running
// memory), the communication report (totals = sums of its collectives), the timeline simulator,
// the executor, the GUI and traces. Ranks of a data-parallel group are symmetric (partitions are
// padded to equal size), so one rank stands for all.
#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sim/config/config.hpp"
#include "sim/core/units.hpp"
#include "sim/hardware/hardware.hpp"
#include "sim/model/model.hpp"
#include "sim/schedule/param_layout.hpp"

namespace zerolens {

enum class Device : std::uint8_t { Gpu, Cpu, Nvme };
inline constexpr int kDeviceCount = 3;

enum class Category : std::uint8_t {
  Params,           // low-precision (training dtype) parameters
  Grads,            // gradients kept for the optimizer
  MasterParams,     // fp32 master copy (mixed precision, or fp32 with only the optimizer offloaded)
  OptimizerStates,  // momentum / variance
  Activations,      // kept for backward, checkpoints, recompute and working sets
  Buffers,          // communication buckets, stage-3 gathered parameters, staging, casts
  Overhead,         // CUDA context, library workspaces, fragmentation allowance
};
inline constexpr int kCategoryCount = 7;

// Finer names: where every byte goes. Each component belongs to exactly one category.
enum class Component : std::uint8_t {
  ParamsFull,        // Params: replicated low-precision parameters (stage 0-2)
  ParamsPartition,   // Params: this rank's partition (stage 3)
  ParamsPersistent,  // Params: stage-3 parameters below the persistence threshold, kept whole
  ParamsSecondary,   // Params: ZeRO++ hpZ's secondary partition (forward to the step's end)
  ParamsQuantizationState,  // Params: 4-bit base weights' quantization constants, whole per rank
  GradsFull,                // Grads: replicated gradients (stage 0-1)
  GradsPartition,   // Grads: this rank's reduced gradient partition (stage 2-3, stage 1 after
                    // reduce)
  MasterPartition,  // MasterParams
  OptimizerStatePartition,  // OptimizerStates
  ActivationsStored,        // Activations: kept for backward
  ActivationCheckpoints,    // Activations: checkpointed layer inputs
  ActivationWorking,        // Activations: forward/backward/recompute working sets
  GatheredParams,           // Buffers: stage-3 parameters gathered from other ranks
  UnreducedGrads,           // Buffers: per-layer gradients before they enter a reduce bucket
  ReduceBucket,             // Buffers: gradient reduce buckets
  Fp32GradCast,             // Buffers: flattened and fp32 gradient copies for the optimizer step
  OptimizerTemporaries,  // Buffers: tensors the optimizer kernel makes in its step (foreach sqrt)
  DequantizedWeight,     // Buffers: a 4-bit weight dequantized to 16 bits around its matmul
  OffloadStaging,        // Buffers: host-device staging for offload
  NvmeSwapBuffers,       // Buffers: pinned host buffers for NVMe swapping
  CudaContext,           // Overhead
  LibraryWorkspace,      // Overhead: cuBLAS / NCCL workspaces
  Fragmentation,         // Overhead: allocator fragmentation allowance (added to the peak)
};
inline constexpr int kComponentCount = 23;

// TensorParallel: the TP group's collectives (Megatron issues them on their own communicator; the
// next layer waits for them).
// Pipeline: sends and receives between pipeline stages (blocking in Megatron's and DeepSpeed's
// schedules: the next compute waits for them).
// ExpertParallel: a MoE layer's token dispatch and combine over its EP group (DeepSpeed's
// _AllToAll; the layer's experts and the next layer wait for them).
enum class Stream : std::uint8_t {
  Compute,
  Collective,
  H2D,
  D2H,
  Nvme,
  Cpu,
  TensorParallel,
  Pipeline,
  ExpertParallel
};
inline constexpr int kStreamCount = 9;

// Where a rank sits in the job. Ranks are numbered tensor-parallel innermost, then data-parallel,
// then pipeline stages (Megatron's default order; DeepSpeed's PipeModelDataParallelTopology): rank
// = tensor + tp x (data + dp x stage). The one place that numbering is written down: the plan's
// links (which ranks share a node) and the executor's process groups both read it.
struct ParallelShape {
  int tensor = 1, data = 1, pipeline = 1;
  int world() const { return tensor * data * pipeline; }
};
struct RankPlace {
  int tensor = 0, data = 0, stage = 0;
  bool operator==(const RankPlace&) const = default;
};
RankPlace place_of_rank(int rank, const ParallelShape& shape);
int rank_at(const RankPlace& place, const ParallelShape& shape);

// The process group a collective runs over. Ranks are placed tensor-parallel innermost (Megatron's
// order): a TP group is `tensor_parallel` consecutive ranks, a data-parallel group ranks that far
// apart, so a node holds gpus_per_node / tensor_parallel ranks of each DP group.
// Pipeline: a point-to-point pair of neighbouring stages (or the first and last stage's embedding
// group); pipeline stages are outermost, so neighbours are tensor x data parallel ranks apart.
// Replicate: under hybrid sharding, the ranks holding the same partition (one per shard group).
// Secondary: ZeRO++ hpZ's groups of zero_hpz_partition_size consecutive data-parallel ranks.
// NodeLocal, CrossNode: qgZ's all-to-all hops, among a node's ranks, then among the ranks of the
// same local index on every node.
// Expert: a MoE model's expert-parallel group, expert_parallel consecutive data-parallel ranks
// (DeepSpeed's _create_expert_and_data_parallel); ExpertData: the data-parallel ranks holding the
// same experts, expert_parallel apart, over which the expert parameters' ZeRO runs.
enum class ProcessGroup : std::uint8_t {
  Data,
  Tensor,
  Pipeline,
  Replicate,
  Secondary,
  NodeLocal,
  CrossNode,
  Expert,
  ExpertData
};
const char* to_string(ProcessGroup group);

enum class OpKind : std::uint8_t {
  Forward,
  Backward,
  Recompute,  // activation checkpointing: re-run a layer's forward before its backward
  AllGather,
  ReduceScatter,
  AllReduce,
  Broadcast,
  Release,  // free stage-3 gathered parameters
  CopyH2D,
  CopyD2H,
  NvmeRead,
  NvmeWrite,
  OptimizerStep,
  OverflowCheck,  // fp16: all-reduce of the overflow flag
  GradNorm,       // gradient clipping: all-reduce of the squared-norm partial sums
  LossScaleUpdate,
  Send,  // pipeline: activations (forward) or their gradients (backward) to the neighbouring stage
  Recv,  // pipeline: the matching receive; waits for the neighbour's send
  AllToAll,  // each rank sends 1/N of its buffer to each: ZeRO++ qgZ's quantized gradient
             // slices, a MoE layer's dispatched tokens and their combine (expert parallelism)
};
inline constexpr int kOpKindCount = 19;

// What a collective's or copy's bytes travel over.
enum class Link : std::uint8_t { None, Network, PcieH2D, PcieD2H, NvmeRead, NvmeWrite };

const char* to_string(Device device);
Device device_of(OffloadDevice device);  // where an offload setting puts its states (none: the GPU)
const char* to_string(Category category);
const char* to_string(Component component);
const char* to_string(Stream stream);
const char* to_string(OpKind kind);
const char* to_string(Link link);
Category category_of(Component component);
// Whose bytes a component holds across the data-parallel ranks: this rank's partition of a state
// (Partitioned), a full copy in which every rank has its share (Replicated: parameters below
// stage 3, a gathered layer, gradients before they are reduced to their owners), or bytes that
// belong to no rank's share of the model (Unshared: activations, staging, overhead).
enum class Sharing : std::uint8_t { Partitioned, Replicated, Unshared };
Sharing sharing_of(Component component);
bool is_collective(OpKind kind);

struct MemEffect {
  Device device;
  Component component;
  Bytes bytes;  // > 0 allocates, < 0 frees
};

// NVMe ops: what they swap. An optimizer sub-group's master weights and states, or parameter
// partitions: a layer's (read before its gather), or those an optimizer sub-group's update
// completed (written right after it, DeepSpeed's per-sub-group swap-out).
enum class Swapped : std::uint8_t { None, OptimizerStates, Parameters };

// Which phase of the step an op belongs to.
enum class Phase : std::uint8_t { Forward, Backward, Reduce, Optimizer };
const char* to_string(Phase phase);

struct Op {
  OpKind kind{};
  Stream stream{};
  Phase phase{};
  std::int32_t micro_step = 0;
  std::int32_t layer = -1;   // model layer index (the parameter owner for gathers), or -1
  std::int32_t bucket = -1;  // index into Schedule::buckets for gradient reductions
  std::int32_t sub_group = -1;  // optimizer sub-group (NVMe swapping)
  std::int32_t group_size = 1;  // ranks taking part in a collective
  ProcessGroup group = ProcessGroup::Data;  // which group's ranks (group_size of them)
  // Pipeline ops: the stage at the other end, and the global model chunk that sends (a send and
  // its receive carry the same chunk, phase and micro-step).
  std::int32_t peer_stage = -1;
  std::int32_t chunk = -1;
  Link link = Link::None;
  Bytes bytes = 0;     // collective: message (buffer) size as nccl-tests counts it; copy/IO: bytes moved
  double flops = 0;    // compute ops
  Bytes memory_bytes_touched = 0;  // compute ops: bytes read+written in HBM (roofline)
  // NVMe ops: the requests the op issues at once. A sub-group's swap is one; a parameter swap is
  // one per tensor partition, as DeepSpeed's AsyncPartitionedParameterSwapper and the executor swap
  // them.
  std::int32_t io_requests = 1;
  Swapped swapped = Swapped::None;
  // Collectives: the calls the op is launched as, each paying the collective's latency. DeepSpeed
  // gathers the persistent parameters with one all_gather_into_tensor per parameter
  // (partition_parameters.py _allgather_params_coalesced); other collectives are one call.
  std::int32_t calls = 1;
  // Collectives: bytes of one element on the wire (4: fp32; 2: fp16 or bf16); 0 for other ops and
  // scalar collectives.
  std::int32_t wire_element_bytes = 0;
  // ColossalAI's per-tensor or per-module gathers and shard moves: the global parameter tensors
  // [first_tensor, first_tensor + tensor_count) of `layer` (tensor_count 0: all of the layer's).
  std::int32_t first_tensor = -1;
  std::int32_t tensor_count = 0;
  // ZeRO-Offload's delayed parameter update: this host optimizer step updates the previous step's
  // gradients, beside this step's forward and backward.
  bool delayed = false;
  std::uint32_t effects_begin = 0, effects_count = 0;
  std::uint32_t deps_begin = 0, deps_count = 0;
};

// A gradient reduce bucket: a run of parameter tensors (global tensor ids) reduced together.
struct Bucket {
  std::uint32_t tensors_begin = 0;  // range in Schedule::bucket_tensors
  std::uint32_t tensors_count = 0;
  Elements elements = 0;
};

// How the GPU's allocated bytes become reserved bytes (what the allocator holds from the device).
enum class AllocatorKind : std::uint8_t {
  PytorchCaching,  // PyTorch's caching allocator, simulated over the step (caching_allocator.hpp)
  PytorchExpandable,  // the same with expandable_segments:True
  Flat,  // reserved = allocated x (1 + fragmentation_fraction): one buffer per allocation
};
const char* to_string(AllocatorKind kind);
AllocatorKind parse_allocator_kind(const std::string& text);  // throws InputError

struct AllocatorSpec {
  AllocatorKind kind = AllocatorKind::PytorchCaching;
  double fragmentation_fraction = 0;  // Flat only: of the peak allocated GPU bytes
  Bytes device_limit = 0;  // bytes the allocator may reserve (0: unlimited); set from the GPU
};

struct ScheduleOptions {
  bool model_states_only = false;
  // The GPU's memory, which ColossalAI's Gemini places shards against (make_plan sets it from the
  // cluster).
  Bytes gpu_capacity = 0;  // drop activations, buffers and overhead (ZeRO paper accounting)
  Bytes cuda_context_bytes = Bytes{512} << 20;
  Bytes library_workspace_bytes = Bytes{256} << 20;
  AllocatorSpec allocator;
};

// Everything the schedule was built from that later consumers need.
struct ScheduleContext {
  int dp_size = 1;
  int gpus_per_node = 1;
  int stage = 0;
  std::int64_t micro_batch = 1;
  std::int64_t seq_len = 1;         // an encoder-decoder's source sequence
  std::int64_t target_seq_len = 0;  // an encoder-decoder's target sequence (0: none)
  std::int64_t grad_accumulation = 1;
  Precision precision = Precision::Fp32;
  OffloadDevice optimizer_device = OffloadDevice::None;
  OffloadDevice param_device = OffloadDevice::None;
  bool activation_checkpointing = false;
  bool model_states_only = false;
  int tensor_parallel = 1;  // ranks of a TP group (1: none)
  bool sequence_parallel = false;
  int pipeline_parallel = 1;  // pipeline stages (1: none)
  int virtual_stages = 1;
  int pipeline_stage = 0;  // the stage this schedule is
  int shard_group = 0;     // hybrid sharding: ranks a state is partitioned over (0: dp_size)
  int hpz_group = 0;       // ZeRO++ hpZ: ranks of a secondary partition group (0: off)
  bool quantized_weights = false;    // ZeRO++ qwZ
  bool quantized_gradients = false;  // ZeRO++ qgZ
  int expert_parallel = 1;           // ranks of an EP group (1: none)
  // ColossalAI's ShardedModelV2 (its strategy and placement); ZeRO-Offload's delayed update.
  bool colossalai = false;
  ShardStrategy shard_strategy = ShardStrategy::Tensor;
  PlacementPolicy placement = PlacementPolicy::Cuda;
  bool delayed_update = false;

  ZeroStage zero_stage() const { return {stage}; }
  // Ranks of the expert-data-parallel group: the data-parallel ranks holding the same experts.
  int expert_data_parallel() const { return dp_size / std::max(1, expert_parallel); }
  ParallelShape parallel_shape() const { return {tensor_parallel, dp_size, pipeline_parallel}; }
  // Ranks of the job on one node (they share its CPU memory and NVMe).
  int ranks_per_node() const;
  // Ranks of one data-parallel group on one node (TP innermost: gpus_per_node / tensor_parallel).
  int data_parallel_ranks_per_node() const;
  // Whether this stage's rank and `other_stage`'s (same TP and DP coordinates) share a node:
  // ranks are numbered TP innermost, then DP, then pipeline stages.
  bool stage_on_same_node(int other_stage) const;
  // Ranks a state is partitioned over, and the groups that hold copies of each partition.
  int shard_size() const { return shard_group > 0 ? shard_group : dp_size; }
  int replicas() const { return dp_size / shard_size(); }
};

// What ColossalAI's Gemini (placement "auto", sim/schedule/gemini.hpp) moved: the warm-up step
// that collects its statistics, and the steady step this schedule is (its moves are ops).
struct GeminiReport {
  bool active = false;
  Bytes warmup_evicted = 0, warmup_fetched = 0;  // shards to the host, to the GPU
  Bytes steady_evicted = 0, steady_fetched = 0;
  std::string failure;  // non-empty: the policy cannot make room ("Adjust layout failed!")
};

struct Schedule {
  ScheduleContext context;
  GeminiReport gemini;
  ParamLayout layout;
  std::vector<MemEffect> resident;  // allocated at initialisation, before the step
  // Initialisation in order, from process start to the step (what is left is `resident`):
  // [kInitWholeModel] the model is moved to the GPU whole and then partitioned; [kInitPartitioned]
  // it is built partitioned (DeepSpeed's zero.Init, a meta-device init). Alike below stage 3.
  static constexpr std::size_t kInitWholeModel = 0, kInitPartitioned = 1;
  std::array<std::vector<MemEffect>, 2> initialization;
  std::vector<Op> ops;              // in program order (a valid topological order)
  std::vector<MemEffect> effects;
  std::vector<std::uint32_t> dependencies;
  std::vector<Bucket> buckets;
  std::vector<std::int32_t> bucket_tensors;  // global tensor ids of all buckets, bucket after bucket
  AllocatorSpec allocator;

  std::span<const std::int32_t> tensors_of(const Bucket& bucket) const {
    return {bucket_tensors.data() + bucket.tensors_begin, bucket.tensors_count};
  }

  std::span<const MemEffect> effects_of(const Op& op) const {
    return {effects.data() + op.effects_begin, op.effects_count};
  }
  std::span<const std::uint32_t> deps_of(const Op& op) const {
    return {dependencies.data() + op.deps_begin, op.deps_count};
  }
  // "rank 0 all-gathers layer h.5's parameters: 48.00 MB over the network"; `rank` names the rank
  // (all ranks run the same op on their own data and partition).
  std::string describe(std::size_t op_index, const Model& model, int rank = 0) const;
};

// Why op `index` happens, in a sentence (what ZeRO, the offload or the parallelism keeps where, so
// that it must run here: "ZeRO-3 keeps 1/4 of each layer's parameters on a rank, so h.0 is
// gathered from the 4 ranks just before its forward"); empty for ops that need no reason.
std::string op_reason(const Schedule& schedule, std::size_t index, const Model& model);

}  // namespace zerolens
