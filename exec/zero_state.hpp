#pragma once
// The ZeRO engine's per-rank state and the handlers of each op kind (internal to exec/).
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/loss_scaler.hpp"
#include "exec/numbers.hpp"
#include "exec/nvme_io.hpp"
#include "exec/zero_engine.hpp"

namespace zerolens::exec {

// A run of elements of one tensor whose optimizer state this rank owns.
struct OwnedSegment {
  std::int32_t tensor = 0;
  Elements begin = 0;         // first element within the tensor
  Elements length = 0;
  Elements owned_offset = 0;  // position in the owned gradient partition and optimizer states
};

// What the model computes on: views of one layer's tensors in fp32, directly on fp32 storage or
// on a scratch copy of 16-bit storage (gradients are cast back by commit()).
struct LayerParams {
  std::optional<ScratchFloats> scratch;
  std::vector<std::span<const float>> views;
};
struct LayerGrads {
  std::optional<ScratchFloats> scratch;
  std::vector<std::span<float>> views;
  std::vector<Numbers> storage;  // 16-bit: where commit() writes the views back
  void commit();
};
// The views above are in the memory space of the ledger's Gpu device (host memory on the CPU
// backend): the model computes where the engine's device buffers are.

// The fp32 numbers of a host buffer (the host optimizer's), which host code reads directly.
inline std::span<float> host_floats(const NumberBuffer& buffer) {
  const Numbers view = buffer.view();
  if (!view.on_host()) throw std::logic_error("the host optimizer's numbers are not in host memory");
  return view.wide();
}

// A run [owned_offset, owned_offset + length) of the owned gradient partition.
struct OwnedRun {
  Elements owned_offset = 0, length = 0;
};

// Bytes held in NVMe files, on the ledger (device Nvme) for as long as this lives.
class NvmeReservation {
 public:
  NvmeReservation(MemoryLedger& ledger, Component component, Bytes bytes);
  ~NvmeReservation();
  NvmeReservation(const NvmeReservation&) = delete;
  NvmeReservation& operator=(const NvmeReservation&) = delete;

 private:
  MemoryLedger& ledger_;
  Component component_;
  Bytes bytes_;
};

// The NVMe swap directories this engine made, removed with it (also when its construction fails):
// the files are the engine's working memory, not a checkpoint.
struct SwapDirectories {
  std::vector<std::string> paths;
  SwapDirectories() = default;
  SwapDirectories(const SwapDirectories&) = delete;
  SwapDirectories& operator=(const SwapDirectories&) = delete;
  ~SwapDirectories();
};

// The optimizer's fp32 master and states of one range of the owned partition, wherever they are
// (in memory, or a sub-group's swap buffer read from NVMe); states absent are empty.
struct OptimizerRange {
  Elements begin = 0;  // owned position of element 0
  std::span<float> master, first_state, second_state;
};

struct ZeroEngine::State {
  State(const Plan& plan, Communicator& comm, LayerModel& net, MemoryLedger& ledger, const EngineOptions& options);

  void begin_step(std::int64_t step_index);
  void run(const Op& op);
  void run_op(const Op& op);
  StepReport finish_step();
  std::vector<float> full_parameters();
  RankShard checkpoint_shard() const;
  void restore(const FullState& state);

  const Plan& plan;
  const Schedule& schedule;
  const Model& model;
  const ParamLayout& layout;
  Communicator& comm;
  LayerModel& net;
  MemoryLedger& ledger;
  Optimizer optimizer;
  LossScaler scaler;
  EngineOptions options;
  ZeroStage stage;  // what this stage partitions (sim/config/zero_stage.hpp)
  int dp = 1, rank = 0;
  NumberFormat param_format = NumberFormat::Fp32, grad_format = NumberFormat::Fp32;
  bool mixed = false;       // 16-bit parameters and gradients
  bool has_master = false;  // an fp32 master partition besides the parameters: mixed precision, or
                            // a host optimizer with the parameters on the device (fp32 too)
  Device optimizer_device = Device::Gpu, param_device = Device::Gpu;
  LinkBytes copied;

 private:
  // parameters (zero_params.cpp)
  void init_parameters();
  void build_segments();
  void allocate_optimizer_state();
  std::size_t owner_of(std::size_t layer) const;
  std::pair<std::int32_t, std::int32_t> tensors_of_layer(std::size_t owner) const;
  LayerParams layer_params(std::size_t owner);
  void gather_layer(std::size_t owner);
  void release_layer(std::size_t owner);
  void gather_persistent();
  void gather_updated_shard(const Op& op);
  void gather_updated_slice(Elements offset, Elements elements);
  // Elements per rank staged at once by gather_updated_shard: at most (1 + dp) x this x the
  // parameter's bytes above the plan, which gathers in place as DeepSpeed does.
  static constexpr Elements kGatherSliceElements = Elements(1) << 20;
  void write_flat(Elements first, Numbers values);
  void read_flat(Elements first, Numbers values);
  Numbers owned_params(const OwnedSegment& segment) const;
  Numbers device_params(const OwnedSegment& segment);
  // gradients (zero_grads.cpp)
  LayerGrads layer_grads(std::size_t owner);
  void reduce_bucket(const Op& op);
  void reduce_bucket_stage3(std::span<const std::int32_t> tensors);
  void reduce_bucket_flat(const Op& op, std::vector<std::int32_t> tensors);
  void ensure_grad_partition();
  Numbers reduce_flat(const Op& op, Numbers bucket, Elements first, Elements last);
  void keep_reduced(Numbers reduced, std::vector<OwnedRun> runs);
  Numbers new_grad_chunk(Elements owned_begin, Elements length);
  Numbers owned_grads(const OwnedSegment& segment);
  Numbers staging(std::size_t elements, NumberBuffer& transient);
  void follow_reduce_buffer(const Op& op, bool allocations);
  void free_step_gradients();
  // precision and the update (zero_precision.cpp)
  void inject_fault(const Op& op);
  bool local_overflow();
  void check_overflow();
  void grad_norm();
  void optimizer_step();
  float update_factor() const;
  void device_update(float factor);
  void host_update(float factor);
  // offload copies (zero_offload.cpp)
  void copy_to_device(const Op& op);
  void copy_to_host(const Op& op);
  void stage_layer_partition(std::size_t owner);
  void write_back_params();
  // the host optimizer on a range of the owned partition (zero_precision.cpp)
  bool host_optimizer() const { return optimizer_device != Device::Gpu; }
  OptimizerRange optimizer_in_memory();
  void update_range(const OptimizerRange& range, float factor);
  void store_updated_params(const OptimizerRange& range);
  // NVMe offload (zero_nvme.cpp)
  void open_nvme();
  void init_nvme_optimizer(std::span<const float> master);
  void nvme_read(const Op& op);
  void nvme_write(const Op& op);
  Elements group_length(std::int32_t group) const;
  OptimizerRange swapped_group(std::int32_t group);
  std::span<std::byte> swapped_bytes(std::int32_t group);
  void read_optimizer_group(std::int32_t group);
  void write_optimizer_group(std::int32_t group);
  void optimizer_group_step(std::int32_t group);
  std::size_t swap_set_of(std::int32_t group) const;
  void wait_swap_set(std::size_t set);
  void wait_optimizer_io();  // every set
  void read_layer_partitions(std::size_t owner);
  void finish_param_writes();
  void write_param_partition(std::size_t tensor, Numbers values);
  void read_param_partition(std::size_t tensor, Numbers destination);
  void stream_param_partition(std::size_t tensor, Elements from, std::span<const float> values);
  void set_partition(std::size_t tensor, std::span<const float> values);
  void finish_nvme_io();
  std::vector<float> read_optimizer_objects() const;
  void restore_nvme_optimizer(std::span<const float> master, std::span<const std::vector<float>> states);
  // compute
  void forward(const Op& op);
  void backward(const Op& op);
  void ensure_batch(std::int32_t micro_step);

  std::vector<Elements> flat_offset_, partition_offset_;
  std::vector<NumberBuffer> full_;   // per tensor: whole (stage 0-2), persistent or gathered (stage 3), padded to dp partitions in stage 3
  std::vector<NumberBuffer> part_;   // stage 3: this rank's partition of each tensor (on the host with parameter offload)
  std::vector<NumberBuffer> grads_;  // per tensor: whole gradient before reduction
  NumberBuffer grad_part_;           // stages 2-3 without optimizer offload: the reduced gradients this rank owns
  TrackedBuffer<float> host_grads_;  // optimizer offload: the fp32 gradient partition on the host
  NumberBuffer master_;              // the fp32 master partition (has_master), unless in NVMe files
  NumberBuffer first_state_, second_state_;  // fp32, on the optimizer's device
  struct GradChunk {
    Elements begin = 0;  // position in the owned partition
    NumberBuffer values;
  };
  std::vector<GradChunk> grad_chunks_;  // stage 1: the reduced part of each bucket
  NumberBuffer scatter_output_;         // a reduce-scatter's share, while it is added in
  NumberBuffer reduce_buffer_;          // the schedule's persistent ReduceBucket (ipg buffer)
  NumberBuffer reduced_;                // optimizer offload: a bucket's owned gradients until its CopyD2H
  std::vector<OwnedRun> reduced_runs_;  // where they go in the host partition
  NumberBuffer h2d_staging_;            // parameter offload: a layer's partitions until its all-gather
  std::vector<OwnedSegment> segments_;
  // NVMe offload: one store (directory) per offloaded kind, the files on the ledger, the host swap
  // buffers the schedule counts (NvmeSwapBuffers) and the I/O in flight.
  SwapDirectories swap_directories_;  // declared before the stores: removed after they finish
  std::unique_ptr<NvmeStore> optimizer_store_, param_store_;
  std::vector<std::unique_ptr<NvmeReservation>> nvme_files_;
  // buffer_count x sub-group elements, in sets of [master | states] of one sub-group each; sub-group
  // g uses set g mod sets (sim's optimizer_swap_buffer_sets), so the next one can be read while g
  // is updated (pipeline_read)
  TrackedBuffer<float> optimizer_swap_;
  Elements group_elements_ = 0;                          // optimizer sub-group size
  std::vector<std::optional<NvmeTicket>> swap_set_io_;  // per set: the read or write in flight
  NumberBuffer param_swap_;  // buffer_count x buffer_size parameters in the training dtype
  std::vector<NvmeTicket> param_io_;
  std::size_t param_swap_used_ = 0;       // elements of param_swap_ in use by reads or writes
  std::vector<std::size_t> param_slot_;   // per tensor: where its partition is assembled for writing
  std::int64_t step_index_ = 0;
  std::int32_t loaded_micro_ = -1;
  Elements shard_offset_ = 0;  // stages 1-2: position of the next all-gather shard in the partition
  double loss_sum_ = 0, norm_ = 0;
  double step_scale_ = 1;  // the loss scale of this step's backward
  bool overflow_ = false;  // fp16: this step's gradients overflowed on some rank; the update is skipped
  int losses_ = 0;
};

}  // namespace zerolens::exec
