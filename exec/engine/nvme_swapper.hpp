#pragma once
// The engine's NVMe swapper (ZeRO-Infinity, internal to exec/): the optimizer's fp32 master and
// states live in files, one object per sub-group, and cross to the host through the swap buffers
// the schedule counts (NvmeSwapBuffers) at its NvmeRead / OptimizerStep / NvmeWrite ops; stage-3
// parameters live in files, one object per tensor partition, read before a layer's CopyH2D and
// written back as the update produces them.
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "exec/engine/context.hpp"
#include "exec/io/nvme_io.hpp"

namespace zerolens::exec {

// The optimizer's fp32 master and states of one range of the owned partition, wherever they are
// (in memory, or a sub-group's swap buffer read from NVMe); states absent are empty.
struct OptimizerRange {
  Elements begin = 0;  // owned position of element 0
  std::span<float> master, first_state, second_state;
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

// The I/O is asynchronous (NvmeStore: io_uring, O_DIRECT): a sub-group's write runs while the next
// op starts and is waited for only when its buffer is needed again; parameter writes run while the
// update goes on and are waited for at the schedule's NvmeWrite. Bytes moved by the schedule's ops
// are counted in the context's `copied` (initialisation and checkpoints are not).
class NvmeSwapper {
 public:
  // Opens the stores the plan offloads to NVMe (none: an idle swapper); throws InputError where
  // the swap buffers cannot hold a sub-group or a layer.
  NvmeSwapper(EngineContext& context, std::size_t optimizer_states);
  // Finishes the I/O in flight before the swap buffers it reads and writes go: a run that unwinds
  // mid-step (an error, SIGINT/SIGTERM) leaves requests queued.
  ~NvmeSwapper();
  NvmeSwapper(const NvmeSwapper&) = delete;
  NvmeSwapper& operator=(const NvmeSwapper&) = delete;

  bool optimizer_in_files() const { return optimizer_store_ != nullptr; }
  bool params_in_files() const { return param_store_ != nullptr; }

  // Optimizer sub-groups: g holds owned elements [g x size, (g + 1) x size) (the last one fewer).
  Elements group_length(std::int32_t group) const;
  bool last_group(std::int32_t group) const;
  OptimizerRange swapped_group(std::int32_t group);    // in its swap set
  void init_optimizer(std::span<const float> master);  // the initial master, zero states
  void read_group(std::int32_t group);                 // asynchronous
  void wait_group(std::int32_t group);
  void write_group(std::int32_t group);  // waits unless pipeline_write
  // [master | first state | second state] over the owned partition, read back (outside the step).
  std::vector<float> read_optimizer_objects() const;
  void restore_optimizer(std::span<const float> master, std::span<const std::vector<float>> states);

  // Stage-3 parameter partitions.
  Numbers param_buffer(std::size_t elements) { return param_swap_.view(0, elements); }
  void read_layer_partitions(std::size_t owner);  // into the swap buffer, in tensor order
  void finish_param_io();                         // waits for every read and write in flight
  void write_param_partition(std::size_t tensor, Numbers values);  // synchronous
  void read_param_partition(std::size_t tensor, Numbers destination);
  // Updated values of [from, from + values.size()) of `tensor`'s partition into its slot; a
  // complete partition is copied to `persistent_block` (where not empty) and its write starts.
  void stream_param_partition(std::size_t tensor, Elements from, std::span<const float> values,
                              Numbers persistent_block);

  void finish_io();  // every step ends with its I/O complete (and its errors thrown)

 private:
  void open_optimizer_store();
  void open_param_store();
  std::size_t swap_set_of(std::int32_t group) const;
  void wait_swap_set(std::size_t set);
  std::span<std::byte> swapped_bytes(std::int32_t group);
  Elements sub_group_size() const;

  EngineContext& ctx_;
  std::size_t states_ = 0;            // optimizer states per element
  SwapDirectories swap_directories_;  // declared before the stores: removed after they finish
  std::unique_ptr<NvmeStore> optimizer_store_, param_store_;
  std::vector<std::unique_ptr<NvmeReservation>> nvme_files_;
  // buffer_count x sub-group elements, in sets of [master | states] of one sub-group each;
  // sub-group g uses set g mod sets (sim's optimizer_swap_buffer_sets), so the next one can be read
  // while g is updated (pipeline_read)
  TrackedBuffer<float> optimizer_swap_;
  Elements group_elements_ = 0;                         // optimizer sub-group size
  std::vector<std::optional<NvmeTicket>> swap_set_io_;  // per set: the read or write in flight
  NumberBuffer param_swap_;  // buffer_count x buffer_size parameters in the training dtype
  std::vector<NvmeTicket> param_io_;
  std::size_t param_swap_used_ = 0;      // elements of param_swap_ in use by reads or writes
  std::vector<std::size_t> param_slot_;  // per tensor: where its partition is assembled for writing
};

}  // namespace zerolens::exec
