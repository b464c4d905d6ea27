// NVMe offload (ZeRO-Infinity) in the engine: the optimizer's fp32 master and states live in files,
// one object per sub-group, and cross to the host through the swap buffers the schedule counts
// (NvmeSwapBuffers) at its NvmeRead / OptimizerStep / NvmeWrite ops; stage-3 parameters live in
// files, one object per tensor partition, read before a layer's CopyH2D and written back as the
// update produces them. The I/O is asynchronous (NvmeStore: io_uring, O_DIRECT): a sub-group's
// write runs while the next op starts and is waited for only when its buffer is needed again;
// parameter writes run while the update goes on and are waited for at the schedule's NvmeWrite.
#include <algorithm>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <string>
#include <system_error>

#include "exec/zero_state.hpp"
#include "sim/core/error.hpp"

namespace zerolens::exec {
namespace {

constexpr std::size_t kNoSlot = std::numeric_limits<std::size_t>::max();

std::span<std::byte> bytes_of(Numbers values) {
  if (values.format() == NumberFormat::Fp32) return std::as_writable_bytes(values.wide());
  return std::as_writable_bytes(values.narrow());
}

std::span<std::byte> bytes_of(std::span<float> values) { return std::as_writable_bytes(values); }

std::string group_object(std::int32_t group) { return "optimizer_group_" + std::to_string(group); }
std::string param_object(std::size_t tensor) { return "param_partition_" + std::to_string(tensor); }

// <nvme_path>/zerolens-rank<r>-<kind>: ranks sharing a drive keep apart.
std::unique_ptr<NvmeStore> open_store(const OffloadConfig& offload, const std::string& key, int rank,
                                      const std::string& kind, SwapDirectories& made) {
  const std::filesystem::path directory =
      std::filesystem::path(offload.nvme_path) / ("zerolens-rank" + std::to_string(rank) + "-" + kind);
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) throw InputError(key, "cannot create " + directory.string() + ": " + error.message());
  made.paths.push_back(directory.string());
  try {
    // Swap files keep their size from step to step; a failed write stops the run anyway.
    return std::make_unique<NvmeStore>(directory.string(), NvmeOptions{.overwrite_in_place = true});
  } catch (const NvmeError& failure) {
    throw InputError(key, failure.what());
  }
}

}  // namespace

NvmeReservation::NvmeReservation(MemoryLedger& ledger, Component component, Bytes bytes)
    : ledger_(ledger), component_(component), bytes_(bytes) {
  ledger_.allocate(Device::Nvme, component_, bytes_);
}

NvmeReservation::~NvmeReservation() { ledger_.release(Device::Nvme, component_, bytes_); }

// The stores, the swap buffers and the files' bytes on the ledger, as the schedule's resident
// effects put them; what the buffers cannot hold is refused here, before any step.
void ZeroEngine::State::open_nvme() {
  const ZeroConfig& zero = plan.request.config.zero;
  const auto owned = layout.owned;
  if (optimizer_device == Device::Nvme) {
    const std::string key = "zero_optimization.offload_optimizer";
    const int states = int(optimizer.state_per_element());
    const auto needed = optimizer_swap_buffers_per_sub_group(states);
    if (zero.offload_optimizer.buffer_count < needed) {
      throw InputError(key + ".buffer_count", "must be at least " + std::to_string(needed) +
                                                  " (a sub-group's fp32 master, each optimizer state and its gradient take one, as in "
                                                  "DeepSpeed's optimizer swapper)");
    }
    optimizer_store_ = open_store(zero.offload_optimizer, key + ".nvme_path", rank, "optimizer", swap_directories_);
    group_elements_ = std::min(std::max<Elements>(1, zero.sub_group_size), owned);
    swap_set_io_.assign(std::size_t(optimizer_swap_buffer_sets(zero.offload_optimizer, states)), std::nullopt);
    optimizer_swap_ = {ledger, Device::Cpu, Component::NvmeSwapBuffers,
                       std::size_t(zero.offload_optimizer.buffer_count) * std::size_t(group_elements_), kNvmeAlignment};
    nvme_files_.push_back(std::make_unique<NvmeReservation>(ledger, Component::MasterPartition, owned * 4));
    nvme_files_.push_back(std::make_unique<NvmeReservation>(
        ledger, Component::OptimizerStatePartition, owned * 4 * Bytes(optimizer.state_per_element())));
  }
  if (param_device != Device::Nvme) return;
  const std::string key = "zero_optimization.offload_param";
  const auto capacity = std::size_t(zero.offload_param.buffer_count) * std::size_t(zero.offload_param.buffer_size);
  for (std::size_t owner = 0; owner + 1 < layout.layer_first_tensor.size(); ++owner) {
    std::size_t elements = 0;
    const auto [first, last] = tensors_of_layer(owner);
    for (auto t = first; t < last; ++t) elements += std::size_t(layout.tensor_partition[std::size_t(t)]);
    if (elements > capacity) {
      throw InputError(key + ".buffer_size", "layer " + model.layers[owner].name + "'s partition of " +
                                                 std::to_string(elements) + " parameters does not fit buffer_count x "
                                                 "buffer_size = " + std::to_string(capacity));
    }
  }
  param_store_ = open_store(zero.offload_param, key + ".nvme_path", rank, "params", swap_directories_);
  param_swap_ = {ledger, Device::Cpu, Component::NvmeSwapBuffers, param_format, capacity};
  param_slot_.assign(layout.tensor_numel.size(), kNoSlot);
  Elements partitions = 0;
  for (const Elements partition : layout.tensor_partition) partitions += partition;
  nvme_files_.push_back(std::make_unique<NvmeReservation>(ledger, Component::ParamsPartition,
                                                          partitions * Bytes(element_bytes(param_format))));
}

// A tensor's stage-3 partition (values beyond the tensor are padding, zero), wherever it lives.
void ZeroEngine::State::set_partition(std::size_t tensor, std::span<const float> values) {
  const auto partition = std::size_t(layout.tensor_partition[tensor]);
  const Numbers target = param_store_ ? param_swap_.view(0, partition) : part_[tensor].view();
  target.fill_zero();
  target.sub(0, values.size()).write(values);
  if (param_store_) write_param_partition(tensor, target);
}

// Sub-group g holds owned elements [g x size, (g + 1) x size) (the last one fewer).
Elements ZeroEngine::State::group_length(std::int32_t group) const {
  const Elements size = std::max<Elements>(1, plan.request.config.zero.sub_group_size);
  return std::min(size, layout.owned - Elements(group) * size);
}

std::size_t ZeroEngine::State::swap_set_of(std::int32_t group) const {
  return std::size_t(group) % swap_set_io_.size();
}

// The swap buffer set holding sub-group g: master | first state | second state.
OptimizerRange ZeroEngine::State::swapped_group(std::int32_t group) {
  const auto length = std::size_t(group_length(group));
  const auto buffers = optimizer_swap_buffers_per_sub_group(int(optimizer.state_per_element()));
  const std::size_t set_elements = std::size_t(buffers) * std::size_t(group_elements_);
  const std::span<float> buffer = optimizer_swap_.span().subspan(swap_set_of(group) * set_elements, set_elements);
  OptimizerRange range{.begin = Elements(group) * std::max<Elements>(1, plan.request.config.zero.sub_group_size),
                       .master = buffer.subspan(0, length)};
  const std::size_t states = optimizer.state_per_element();
  if (states >= 1) range.first_state = buffer.subspan(length, length);
  if (states >= 2) range.second_state = buffer.subspan(2 * length, length);
  return range;
}

// Each sub-group's object starts as the initial master and zero states.
void ZeroEngine::State::init_nvme_optimizer(std::span<const float> master) {
  for (Elements begin = 0, group = 0; begin < layout.owned; begin += group_length(std::int32_t(group)), ++group) {
    const OptimizerRange range = swapped_group(std::int32_t(group));
    std::fill(optimizer_swap_.data(), optimizer_swap_.data() + optimizer_swap_.size(), 0.0f);
    std::copy_n(master.begin() + begin, range.master.size(), range.master.begin());
    optimizer_store_->write(group_object(std::int32_t(group)), swapped_bytes(std::int32_t(group)));
  }
}

void ZeroEngine::State::wait_swap_set(std::size_t set) {
  if (!swap_set_io_[set]) return;
  const NvmeTicket ticket = *swap_set_io_[set];
  swap_set_io_[set].reset();
  optimizer_store_->wait(ticket);
}

void ZeroEngine::State::wait_optimizer_io() {
  for (std::size_t set = 0; set < swap_set_io_.size(); ++set) wait_swap_set(set);
}

// The bytes of sub-group g's master and states in its swap set.
std::span<std::byte> ZeroEngine::State::swapped_bytes(std::int32_t group) {
  const OptimizerRange range = swapped_group(group);
  const std::size_t used = range.master.size() * (1 + optimizer.state_per_element());
  return bytes_of(std::span(range.master.data(), used));
}

// NvmeRead of a sub-group into its set, once the write of the sub-group that used the set last is
// complete. A skipped step (fp16 overflow) moves nothing: nothing changes.
void ZeroEngine::State::read_optimizer_group(std::int32_t group) {
  if (overflow_) return;
  const std::size_t set = swap_set_of(group);
  wait_swap_set(set);
  const std::span<std::byte> bytes = swapped_bytes(group);
  swap_set_io_[set] = optimizer_store_->read_async(group_object(group), bytes);
  copied.nvme_read += Bytes(bytes.size());
}

// Without pipeline_write the CPU waits for the write (DeepSpeed's synchronous swap-out), as the
// schedule's next update waits for it.
void ZeroEngine::State::write_optimizer_group(std::int32_t group) {
  if (overflow_) return;
  const std::size_t set = swap_set_of(group);
  wait_swap_set(set);  // the update waited for the read already; nothing else is pending
  const std::span<std::byte> bytes = swapped_bytes(group);
  swap_set_io_[set] = optimizer_store_->write_async(group_object(group), bytes);
  copied.nvme_write += Bytes(bytes.size());
  if (!plan.request.config.zero.offload_optimizer.pipeline_write) wait_swap_set(set);
}

// The host optimizer on one sub-group as soon as its read is complete; the new parameters go
// where parameters live (on the device they are counted by the schedule's CopyH2D after).
void ZeroEngine::State::optimizer_group_step(std::int32_t group) {
  if (!overflow_) {
    if (group == 0) optimizer.begin_step();
    wait_swap_set(swap_set_of(group));
    const OptimizerRange range = swapped_group(group);
    update_range(range, update_factor());
    store_updated_params(range);
  }
  if (swapped_group(group).begin + group_length(group) >= layout.owned) free_step_gradients();
}

void ZeroEngine::State::nvme_read(const Op& op) {
  if (op.sub_group >= 0) return read_optimizer_group(op.sub_group);
  if (op.layer < 0) throw std::logic_error("schedule error: an NVMe read of neither a sub-group nor a layer");
  read_layer_partitions(std::size_t(op.layer));
}

void ZeroEngine::State::nvme_write(const Op& op) {
  if (op.sub_group >= 0) return write_optimizer_group(op.sub_group);
  finish_param_writes();
}

// A layer's partitions (persistent tensors are whole on the device), one after another in the
// parameter swap buffer, for its CopyH2D.
void ZeroEngine::State::read_layer_partitions(std::size_t owner) {
  finish_param_writes();
  const auto [first, last] = tensors_of_layer(owner);
  std::size_t position = 0;
  for (auto t = first; t < last; ++t) {
    const auto index = std::size_t(t);
    if (layout.tensor_persistent[index]) continue;
    const auto partition = std::size_t(layout.tensor_partition[index]);
    param_io_.push_back(param_store_->read_async(param_object(index), bytes_of(param_swap_.view(position, partition))));
    copied.nvme_read += Bytes(partition * element_bytes(param_format));
    position += partition;
  }
  param_swap_used_ = position;
}

// Waits for every parameter read or write in flight; the swap buffer is free after.
void ZeroEngine::State::finish_param_writes() {
  std::vector<NvmeTicket> pending;
  pending.swap(param_io_);
  param_swap_used_ = 0;
  for (const NvmeTicket ticket : pending) param_store_->wait(ticket);
}

// Synchronous: initialisation and restore.
void ZeroEngine::State::write_param_partition(std::size_t tensor, Numbers values) {
  param_store_->write(param_object(tensor), bytes_of(values));
}

void ZeroEngine::State::read_param_partition(std::size_t tensor, Numbers destination) {
  param_store_->read(param_object(tensor), bytes_of(destination));
}

// Updated master values of owned elements [from, from + values.size()) of `tensor`'s partition,
// rounded into the tensor's slot of the swap buffer; a complete partition starts its write (and a
// persistent one goes to its own block of the whole tensor on the device, for the gather after).
void ZeroEngine::State::stream_param_partition(std::size_t tensor, Elements from, std::span<const float> values) {
  const auto partition = std::size_t(layout.tensor_partition[tensor]);
  if (param_slot_[tensor] == kNoSlot) {
    if (param_swap_used_ + partition > param_swap_.size()) finish_param_writes();
    param_slot_[tensor] = param_swap_used_;
    param_swap_used_ += partition;
    param_swap_.view(param_slot_[tensor], partition).fill_zero();
  }
  const Numbers slot = param_swap_.view(param_slot_[tensor], partition);
  slot.sub(std::size_t(from), values.size()).write(values);
  if (from + Elements(values.size()) < Elements(partition)) return;
  if (layout.tensor_persistent[tensor]) full_[tensor].view(std::size_t(rank) * partition, partition).copy_from(slot);
  param_io_.push_back(param_store_->write_async(param_object(tensor), bytes_of(slot)));
  copied.nvme_write += slot.bytes();
  param_slot_[tensor] = kNoSlot;
}

// Every step ends with its I/O complete (and its errors thrown).
void ZeroEngine::State::finish_nvme_io() {
  if (optimizer_store_) wait_optimizer_io();
  if (param_store_) finish_param_writes();
}

SwapDirectories::~SwapDirectories() {
  for (const std::string& path : paths) {
    std::error_code error;  // nothing to do about a failure here
    std::filesystem::remove_all(path, error);
  }
}

// The whole owned optimizer state read back from the sub-groups' objects, as [master | first
// state | second state] over the owned partition (checkpoints; outside the step).
std::vector<float> ZeroEngine::State::read_optimizer_objects() const {
  const std::size_t states = optimizer.state_per_element();
  const auto owned = std::size_t(layout.owned);
  std::vector<float> all(owned * (1 + states));
  std::vector<float> group_values;
  const Elements size = std::max<Elements>(1, plan.request.config.zero.sub_group_size);
  for (Elements begin = 0, group = 0; begin < layout.owned; begin += size, ++group) {
    const auto length = std::size_t(group_length(std::int32_t(group)));
    group_values.resize(length * (1 + states));
    optimizer_store_->read(group_object(std::int32_t(group)), bytes_of(std::span(group_values)));
    for (std::size_t k = 0; k <= states; ++k) {
      std::copy_n(group_values.begin() + std::ptrdiff_t(k * length), length,
                  all.begin() + std::ptrdiff_t(k * owned + std::size_t(begin)));
    }
  }
  return all;
}

void ZeroEngine::State::restore_nvme_optimizer(std::span<const float> master,
                                               std::span<const std::vector<float>> states) {
  for (Elements begin = 0, group = 0; begin < layout.owned; begin += group_length(std::int32_t(group)), ++group) {
    const OptimizerRange range = swapped_group(std::int32_t(group));
    const auto length = range.master.size();
    std::copy_n(master.begin() + begin, length, range.master.begin());
    if (!range.first_state.empty()) std::copy_n(states[0].begin() + begin, length, range.first_state.begin());
    if (!range.second_state.empty()) std::copy_n(states[1].begin() + begin, length, range.second_state.begin());
    optimizer_store_->write(group_object(std::int32_t(group)), swapped_bytes(std::int32_t(group)));
  }
}

}  // namespace zerolens::exec
