#include "exec/engine/nvme_swapper.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>
#include <system_error>

#include "sim/core/error.hpp"

namespace zerolens::exec {
namespace {

constexpr std::size_t kNoSlot = std::numeric_limits<std::size_t>::max();

std::span<std::byte> bytes_of(Numbers values) {
  if (values.format() == NumberFormat::Fp32) return std::as_writable_bytes(values.wide());
  return std::as_writable_bytes(values.narrow());
}

std::span<std::byte> bytes_of(std::span<float> values) {
  return std::as_writable_bytes(values);
}

std::string group_object(std::int32_t group) {
  return "optimizer_group_" + std::to_string(group);
}
std::string param_object(std::size_t tensor) {
  return "param_partition_" + std::to_string(tensor);
}

// "-pid<pid>@<host>": the process that owns a swap directory.
std::string owner_suffix() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
  return "-pid" + std::to_string(getpid()) + "@" + host;
}

// Swap directories in `parent` of processes on this host that no longer run (killed with SIGKILL,
// or by a power loss: they could not remove their own) are removed, each named on stderr.
void remove_stale(const std::filesystem::path& parent) {
  const std::string own = owner_suffix();
  const std::string host = own.substr(own.find('@') + 1);
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(parent, error)) {
    const std::string name = entry.path().filename().string();
    const auto pid_at = name.rfind("-pid");
    const auto at = name.rfind('@');
    if (name.rfind("zerolens-rank", 0) != 0 || pid_at == std::string::npos ||
        at == std::string::npos || at < pid_at || name.substr(at + 1) != host) {
      continue;
    }
    char* end = nullptr;
    const std::string digits = name.substr(pid_at + 4, at - pid_at - 4);
    const long pid = std::strtol(digits.c_str(), &end, 10);
    if (digits.empty() || *end != 0 || pid <= 0 || pid == long(getpid())) continue;
    if (kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // running (or not ours to judge)
    std::error_code ignored;
    if (std::filesystem::remove_all(entry.path(), ignored) > 0) {
      std::fprintf(stderr,
                   "zerolens run: removed the stale swap directory %s (process %ld is gone)\n",
                   entry.path().c_str(), pid);
    }
  }
}

// <nvme_path>/zerolens-rank<r>-<kind>-pid<pid>@<host>: ranks sharing a drive keep apart, and a
// later run on this host removes the directories of processes that died without removing them.
std::unique_ptr<NvmeStore> open_store(const OffloadConfig& offload, const std::string& key,
                                      int rank, const std::string& kind, SwapDirectories& made) {
  // DeepSpeed creates a missing swap folder (os.makedirs in its swappers); so does zerolens, but
  // says so: a mistyped path would otherwise fill whatever drive holds its parent unnoticed.
  std::error_code exists_error;
  if (!std::filesystem::exists(offload.nvme_path, exists_error)) {
    std::filesystem::create_directories(offload.nvme_path, exists_error);
    if (exists_error)
      throw InputError(key, "cannot create '" + offload.nvme_path + "': " + exists_error.message());
    std::cerr << "note: " << key << ": '" << offload.nvme_path
              << "' did not exist; created it (rank " << rank << ")\n";
  } else if (!std::filesystem::is_directory(offload.nvme_path, exists_error)) {
    throw InputError(key, "'" + offload.nvme_path + "' is not a directory");
  }
  remove_stale(offload.nvme_path);
  const std::filesystem::path directory =
      std::filesystem::path(offload.nvme_path) /
      ("zerolens-rank" + std::to_string(rank) + "-" + kind + owner_suffix());
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

NvmeReservation::~NvmeReservation() {
  ledger_.release(Device::Nvme, component_, bytes_);
}

SwapDirectories::~SwapDirectories() {
  for (const std::string& path : paths) {
    std::error_code error;  // nothing to do about a failure here
    std::filesystem::remove_all(path, error);
  }
}

// The stores, the swap buffers and the files' bytes on the ledger, as the schedule's resident
// effects put them; what the buffers cannot hold is refused here, before any step.
NvmeSwapper::NvmeSwapper(EngineContext& context, std::size_t optimizer_states)
    : ctx_(context), states_(optimizer_states) {
  if (ctx_.optimizer_device == Device::Nvme) open_optimizer_store();
  if (ctx_.param_device == Device::Nvme) open_param_store();
}

NvmeSwapper::~NvmeSwapper() {
  // The stores drain their queues as they close (NvmeStore's destructor), while the buffers live.
  param_store_.reset();
  optimizer_store_.reset();
}

void NvmeSwapper::open_optimizer_store() {
  const ZeroConfig& zero = ctx_.config().zero;
  const auto owned = ctx_.layout.owned;
  const std::string key = "zero_optimization.offload_optimizer";
  const int states = int(states_);
  const auto needed = optimizer_swap_buffers_per_sub_group(states);
  if (zero.offload_optimizer.buffer_count < needed) {
    throw InputError(
        key + ".buffer_count",
        "must be at least " + std::to_string(needed) +
            " (a sub-group's fp32 master, each optimizer state and its gradient take one, as in "
            "DeepSpeed's optimizer swapper)");
  }
  optimizer_store_ = open_store(zero.offload_optimizer, key + ".nvme_path", ctx_.rank, "optimizer",
                                swap_directories_);
  group_elements_ = std::min(ctx_.layout.sub_group_elements(zero.sub_group_size), owned);
  swap_set_io_.assign(std::size_t(optimizer_swap_buffer_sets(zero.offload_optimizer, states)),
                      std::nullopt);
  optimizer_swap_ = {
      ctx_.ledger, Device::Cpu, Component::NvmeSwapBuffers,
      std::size_t(zero.offload_optimizer.buffer_count) * std::size_t(group_elements_),
      kNvmeAlignment};
  nvme_files_.push_back(
      std::make_unique<NvmeReservation>(ctx_.ledger, Component::MasterPartition, owned * 4));
  nvme_files_.push_back(std::make_unique<NvmeReservation>(
      ctx_.ledger, Component::OptimizerStatePartition, owned * 4 * Bytes(states_)));
}

void NvmeSwapper::open_param_store() {
  const ZeroConfig& zero = ctx_.config().zero;
  const ParamLayout& layout = ctx_.layout;
  const std::string key = "zero_optimization.offload_param";
  const auto capacity =
      std::size_t(zero.offload_param.buffer_count) * std::size_t(zero.offload_param.buffer_size);
  for (std::size_t owner = 0; owner + 1 < layout.layer_first_tensor.size(); ++owner) {
    std::size_t elements = 0;
    const auto [first, last] = ctx_.tensors_of_layer(owner);
    for (auto t = first; t < last; ++t)
      elements += std::size_t(layout.tensor_partition[std::size_t(t)]);
    if (elements > capacity) {
      throw InputError(key + ".buffer_size", "layer " + ctx_.model.layers[owner].name +
                                                 "'s partition of " + std::to_string(elements) +
                                                 " parameters does not fit buffer_count x "
                                                 "buffer_size = " +
                                                 std::to_string(capacity));
    }
  }
  param_store_ =
      open_store(zero.offload_param, key + ".nvme_path", ctx_.rank, "params", swap_directories_);
  param_swap_ = {ctx_.ledger, Device::Cpu, Component::NvmeSwapBuffers, ctx_.param_format, capacity};
  param_slot_.assign(layout.tensor_numel.size(), kNoSlot);
  Elements partitions = 0;
  for (const Elements partition : layout.tensor_partition) partitions += partition;
  nvme_files_.push_back(
      std::make_unique<NvmeReservation>(ctx_.ledger, Component::ParamsPartition,
                                        partitions * Bytes(element_bytes(ctx_.param_format))));
}

Elements NvmeSwapper::sub_group_size() const {
  return ctx_.layout.sub_group_elements(ctx_.config().zero.sub_group_size);
}

Elements NvmeSwapper::group_length(std::int32_t group) const {
  return std::min(sub_group_size(), ctx_.layout.owned - Elements(group) * sub_group_size());
}

bool NvmeSwapper::last_group(std::int32_t group) const {
  return Elements(group) * sub_group_size() + group_length(group) >= ctx_.layout.owned;
}

std::size_t NvmeSwapper::swap_set_of(std::int32_t group) const {
  return std::size_t(group) % swap_set_io_.size();
}

// The swap buffer set holding sub-group g: master | first state | second state.
OptimizerRange NvmeSwapper::swapped_group(std::int32_t group) {
  const auto length = std::size_t(group_length(group));
  const auto buffers = optimizer_swap_buffers_per_sub_group(int(states_));
  const std::size_t set_elements = std::size_t(buffers) * std::size_t(group_elements_);
  const std::span<float> buffer =
      optimizer_swap_.span().subspan(swap_set_of(group) * set_elements, set_elements);
  OptimizerRange range{.begin = Elements(group) * sub_group_size(),
                       .master = buffer.subspan(0, length)};
  if (states_ >= 1) range.first_state = buffer.subspan(length, length);
  if (states_ >= 2) range.second_state = buffer.subspan(2 * length, length);
  return range;
}

// Each sub-group's object starts as the initial master and zero states.
void NvmeSwapper::init_optimizer(std::span<const float> master) {
  for (Elements begin = 0, group = 0; begin < ctx_.layout.owned;
       begin += group_length(std::int32_t(group)), ++group) {
    const OptimizerRange range = swapped_group(std::int32_t(group));
    std::fill(optimizer_swap_.data(), optimizer_swap_.data() + optimizer_swap_.size(), 0.0f);
    std::copy_n(master.begin() + begin, range.master.size(), range.master.begin());
    optimizer_store_->write(group_object(std::int32_t(group)), swapped_bytes(std::int32_t(group)));
  }
}

void NvmeSwapper::wait_swap_set(std::size_t set) {
  if (!swap_set_io_[set]) return;
  const NvmeTicket ticket = *swap_set_io_[set];
  swap_set_io_[set].reset();
  optimizer_store_->wait(ticket);
}

void NvmeSwapper::wait_group(std::int32_t group) {
  wait_swap_set(swap_set_of(group));
}

// The bytes of sub-group g's master and states in its swap set.
std::span<std::byte> NvmeSwapper::swapped_bytes(std::int32_t group) {
  const OptimizerRange range = swapped_group(group);
  const std::size_t used = range.master.size() * (1 + states_);
  return bytes_of(std::span(range.master.data(), used));
}

// Into its set, once the write of the sub-group that used the set last is complete.
void NvmeSwapper::read_group(std::int32_t group) {
  const std::size_t set = swap_set_of(group);
  wait_swap_set(set);
  const std::span<std::byte> bytes = swapped_bytes(group);
  swap_set_io_[set] = optimizer_store_->read_async(group_object(group), bytes);
  ctx_.copied.nvme_read += Bytes(bytes.size());
}

// Without pipeline_write the CPU waits for the write (DeepSpeed's synchronous swap-out), as the
// schedule's next update waits for it.
void NvmeSwapper::write_group(std::int32_t group) {
  const std::size_t set = swap_set_of(group);
  wait_swap_set(set);  // the update waited for the read already; nothing else is pending
  const std::span<std::byte> bytes = swapped_bytes(group);
  swap_set_io_[set] = optimizer_store_->write_async(group_object(group), bytes);
  ctx_.copied.nvme_write += Bytes(bytes.size());
  if (!ctx_.config().zero.offload_optimizer.pipeline_write) wait_swap_set(set);
}

// A layer's partitions (persistent tensors are whole on the device), one after another in the
// parameter swap buffer, for its CopyH2D.
void NvmeSwapper::read_layer_partitions(std::size_t owner) {
  finish_param_io();
  const auto [first, last] = ctx_.tensors_of_layer(owner);
  std::size_t position = 0;
  for (auto t = first; t < last; ++t) {
    const auto index = std::size_t(t);
    if (ctx_.layout.tensor_persistent[index]) continue;
    const auto partition = std::size_t(ctx_.layout.tensor_partition[index]);
    param_io_.push_back(param_store_->read_async(param_object(index),
                                                 bytes_of(param_swap_.view(position, partition))));
    ctx_.copied.nvme_read += Bytes(partition * element_bytes(ctx_.param_format));
    position += partition;
  }
  param_swap_used_ = position;
}

// The buffer is free again but for a partition still being assembled: one that straddles two
// optimizer sub-groups, waited for at the first one's parameter write, keeps its slot.
void NvmeSwapper::finish_param_io() {
  std::vector<NvmeTicket> pending;
  pending.swap(param_io_);
  param_swap_used_ = 0;
  for (std::size_t t = 0; t < param_slot_.size(); ++t) {
    if (param_slot_[t] == kNoSlot) continue;
    const auto end = param_slot_[t] + std::size_t(ctx_.layout.tensor_partition[t]);
    param_swap_used_ = std::max(param_swap_used_, end);
  }
  for (const NvmeTicket ticket : pending) param_store_->wait(ticket);
}

void NvmeSwapper::write_param_partition(std::size_t tensor, Numbers values) {
  param_store_->write(param_object(tensor), bytes_of(values));
}

void NvmeSwapper::read_param_partition(std::size_t tensor, Numbers destination) {
  param_store_->read(param_object(tensor), bytes_of(destination));
}

// Rounded into the tensor's slot of the swap buffer (the training dtype).
void NvmeSwapper::stream_param_partition(std::size_t tensor, Elements from,
                                         std::span<const float> values, Numbers persistent_block) {
  const auto partition = std::size_t(ctx_.layout.tensor_partition[tensor]);
  if (param_slot_[tensor] == kNoSlot) {
    if (param_swap_used_ + partition > param_swap_.size()) finish_param_io();
    param_slot_[tensor] = param_swap_used_;
    param_swap_used_ += partition;
    param_swap_.view(param_slot_[tensor], partition).fill_zero();
  }
  const Numbers slot = param_swap_.view(param_slot_[tensor], partition);
  slot.sub(std::size_t(from), values.size()).write(values);
  if (from + Elements(values.size()) < Elements(partition)) return;
  if (persistent_block.size() > 0) persistent_block.copy_from(slot);
  param_io_.push_back(param_store_->write_async(param_object(tensor), bytes_of(slot)));
  ctx_.copied.nvme_write += slot.bytes();
  param_slot_[tensor] = kNoSlot;
}

void NvmeSwapper::finish_io() {
  if (optimizer_store_) {
    for (std::size_t set = 0; set < swap_set_io_.size(); ++set) wait_swap_set(set);
  }
  if (param_store_) finish_param_io();
}

std::vector<float> NvmeSwapper::read_optimizer_objects() const {
  const auto owned = std::size_t(ctx_.layout.owned);
  std::vector<float> all(owned * (1 + states_));
  std::vector<float> group_values;
  for (Elements begin = 0, group = 0; begin < ctx_.layout.owned;
       begin += sub_group_size(), ++group) {
    const auto length = std::size_t(group_length(std::int32_t(group)));
    group_values.resize(length * (1 + states_));
    optimizer_store_->read(group_object(std::int32_t(group)), bytes_of(std::span(group_values)));
    for (std::size_t k = 0; k <= states_; ++k) {
      std::copy_n(group_values.begin() + std::ptrdiff_t(k * length), length,
                  all.begin() + std::ptrdiff_t(k * owned + std::size_t(begin)));
    }
  }
  return all;
}

void NvmeSwapper::restore_optimizer(std::span<const float> master,
                                    std::span<const std::vector<float>> states) {
  for (Elements begin = 0, group = 0; begin < ctx_.layout.owned;
       begin += group_length(std::int32_t(group)), ++group) {
    const OptimizerRange range = swapped_group(std::int32_t(group));
    const auto length = range.master.size();
    std::copy_n(master.begin() + begin, length, range.master.begin());
    if (!range.first_state.empty())
      std::copy_n(states[0].begin() + begin, length, range.first_state.begin());
    if (!range.second_state.empty())
      std::copy_n(states[1].begin() + begin, length, range.second_state.begin());
    optimizer_store_->write(group_object(std::int32_t(group)), swapped_bytes(std::int32_t(group)));
  }
}

}  // namespace zerolens::exec
