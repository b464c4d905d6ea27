// Parameters: where each tensor lives per stage, stage-3 gathers and releases, and the stage 1-2
// all-gather of updated partitions.
#include <algorithm>
#include <stdexcept>

#include "exec/zero_state.hpp"

namespace zerolens::exec {
namespace {

// The plan decides whether an fp32 master partition exists (and where): the engine follows it.
bool plans_master(const Schedule& schedule) {
  return std::any_of(schedule.resident.begin(), schedule.resident.end(), [](const MemEffect& effect) {
    return effect.component == Component::MasterPartition && effect.bytes > 0;
  });
}

}  // namespace

ZeroEngine::State::State(const Plan& plan_, Communicator& comm_, LayerModel& net_,
                         MemoryLedger& ledger_, const EngineOptions& options_)
    : plan(plan_),
      schedule(plan_.schedule),
      model(plan_.request.model),
      layout(plan_.schedule.layout),
      comm(comm_),
      net(net_),
      ledger(ledger_),
      optimizer(plan_.request.config.optimizer),
      scaler(plan_.request.config.precision),
      options(options_),
      stage(plan_.schedule.context.zero_stage()),
      dp(plan_.schedule.context.dp_size),
      rank(comm_.rank()),
      param_format(format_of(plan_.request.config.precision.precision)),
      grad_format(plan_.request.config.precision.grad_bytes() == 4 ? NumberFormat::Fp32
                                                                   : param_format),
      mixed(plan_.request.config.precision.mixed()),
      has_master(plans_master(plan_.schedule)),
      optimizer_device(device_of(plan_.schedule.context.optimizer_device)),
      param_device(device_of(plan_.schedule.context.param_device)) {
  const std::size_t tensors = layout.tensor_numel.size();
  Elements flat = 0, owned = 0;
  for (std::size_t t = 0; t < tensors; ++t) {
    flat_offset_.push_back(flat);
    partition_offset_.push_back(owned);
    flat += layout.tensor_numel[t];
    owned += layout.tensor_partition[t];
  }
  full_.resize(tensors);
  part_.resize(tensors);
  grads_.resize(tensors);
  build_segments();
  open_nvme();
  init_parameters();
  allocate_optimizer_state();
  for (const MemEffect& effect : schedule.resident) {
    if (effect.device == Device::Gpu && effect.component == Component::ReduceBucket) {
      reduce_buffer_ = {ledger, Device::Gpu, Component::ReduceBucket, grad_format,
                        std::size_t(effect.bytes) / element_bytes(grad_format)};
    }
  }
}

// Where the schedule's resident effects put them: states (and the master) on the optimizer's
// device (NVMe: in files, see open_nvme); the gradient partition on the device in stage 3, in fp32
// on the host with offload.
void ZeroEngine::State::allocate_optimizer_state() {
  const auto owned_elements = std::size_t(layout.owned);
  const std::size_t states = optimizer_device == Device::Nvme ? 0 : optimizer.state_per_element();
  const auto state = [&] {
    return NumberBuffer(ledger, optimizer_device, Component::OptimizerStatePartition, NumberFormat::Fp32, owned_elements);
  };
  if (states >= 1) first_state_ = state();
  if (states >= 2) second_state_ = state();
  if (host_optimizer()) {
    host_grads_ = {ledger, Device::Cpu, Component::GradsPartition, owned_elements};
  } else if (stage.partitions_parameters()) {
    grad_part_ = {ledger, Device::Gpu, Component::GradsPartition, grad_format, owned_elements};
  }
}

// 16-bit training starts from the rounded initial values, and the master from those (a model
// initialised, then cast to half, then copied to fp32 as DeepSpeed does). With NVMe offload the
// master is assembled here once, then written to the sub-groups' files.
void ZeroEngine::State::init_parameters() {
  const bool master_in_files = has_master && optimizer_device == Device::Nvme;
  if (has_master && !master_in_files) {
    master_ = {ledger, optimizer_device, Component::MasterPartition, NumberFormat::Fp32, std::size_t(layout.owned)};
  }
  std::vector<float> initial_master(master_in_files ? std::size_t(layout.owned) : 0);
  const Numbers master = master_in_files ? Numbers(std::span<float>(initial_master)) : master_.view();
  for (std::size_t t = 0; t < layout.tensor_numel.size(); ++t) {
    const auto numel = std::size_t(layout.tensor_numel[t]);
    std::vector<float> whole(numel);
    net.init_tensor(std::int32_t(t), whole);
    if (!stage.partitions_parameters()) {
      full_[t] = {ledger, Device::Gpu, Component::ParamsFull, param_format, numel};
      full_[t].view().write(whole);
    } else {
      const auto partition = std::size_t(layout.tensor_partition[t]);
      if (param_device != Device::Nvme) part_[t] = {ledger, param_device, Component::ParamsPartition, param_format, partition};
      const std::size_t first = std::min(numel, std::size_t(rank) * partition);
      const std::size_t count = std::min(numel, first + partition) - first;
      set_partition(t, std::span<const float>(whole).subspan(first, count));
      if (has_master && param_store_) {  // the partition is in the swap buffer still (no part_ in memory)
        master.sub(std::size_t(partition_offset_[t]), count).copy_from(param_swap_.view(0, count));
      }
      if (layout.tensor_persistent[t]) {
        full_[t] = {ledger, Device::Gpu, Component::ParamsPersistent, param_format, partition * std::size_t(dp)};
        full_[t].view(0, numel).write(whole);
      }
    }
  }
  if (!has_master) return;
  for (const OwnedSegment& segment : segments_) {
    if (param_store_) break;
    master.sub(std::size_t(segment.owned_offset), std::size_t(segment.length)).copy_from(device_params(segment));
  }
  if (master_in_files) init_nvme_optimizer(initial_master);
}

// Stage 0 owns everything; stages 1-2 the flat range [rank x P, (rank + 1) x P); stage 3 the
// rank-th partition of every tensor.
void ZeroEngine::State::build_segments() {
  const std::size_t tensors = layout.tensor_numel.size();
  for (std::size_t t = 0; t < tensors; ++t) {
    const Elements numel = layout.tensor_numel[t];
    Elements begin = 0, end = numel, owned_offset = flat_offset_[t];
    if (stage.partitions_parameters()) {
      const Elements partition = layout.tensor_partition[t];
      begin = std::min(numel, rank * partition);
      end = std::min(numel, begin + partition);
      owned_offset = partition_offset_[t];
    } else if (stage.partitions_optimizer_states()) {
      const Elements first = rank * layout.flat_partition, last = first + layout.flat_partition;
      begin = std::clamp(first - flat_offset_[t], Elements(0), numel);
      end = std::clamp(last - flat_offset_[t], Elements(0), numel);
      owned_offset = flat_offset_[t] + begin - first;
    }
    if (end > begin) segments_.push_back({std::int32_t(t), begin, end - begin, owned_offset});
  }
}

// The training-dtype parameters of an owned segment: in the whole tensor (stages 0-2) or in this
// rank's partition (stage 3, on the host with parameter offload).
Numbers ZeroEngine::State::device_params(const OwnedSegment& segment) {
  const auto t = std::size_t(segment.tensor);
  if (!stage.partitions_parameters())
    return full_[t].view(std::size_t(segment.begin), std::size_t(segment.length));
  const Elements first = segment.begin - rank * layout.tensor_partition[t];
  return part_[t].view(std::size_t(first), std::size_t(segment.length));
}

std::size_t ZeroEngine::State::owner_of(std::size_t layer) const {
  const int shared = model.layers[layer].shares_params_of;
  return shared >= 0 ? std::size_t(shared) : layer;
}

std::pair<std::int32_t, std::int32_t> ZeroEngine::State::tensors_of_layer(std::size_t owner) const {
  return {layout.layer_first_tensor[owner], layout.layer_first_tensor[owner + 1]};
}

// fp32 parameters are handed over in place; 16-bit ones as one fp32 scratch copy of the layer.
LayerParams ZeroEngine::State::layer_params(std::size_t owner) {
  LayerParams params;
  const auto [first, last] = tensors_of_layer(owner);
  Elements total = 0;
  for (auto t = first; t < last; ++t) {
    if (full_[std::size_t(t)].size() == 0 && layout.tensor_numel[std::size_t(t)] > 0) {
      throw std::logic_error("schedule error: layer " + model.layers[owner].name + " used before its gather");
    }
    total += layout.tensor_numel[std::size_t(t)];
  }
  if (param_format != NumberFormat::Fp32) params.scratch.emplace(ledger, Device::Gpu, std::size_t(total));
  MemorySpace* const space = ledger.space(Device::Gpu);
  std::size_t position = 0;
  for (auto t = first; t < last; ++t) {
    const auto numel = std::size_t(layout.tensor_numel[std::size_t(t)]);
    const Numbers stored = full_[std::size_t(t)].view(0, numel);
    if (!params.scratch) {
      params.views.emplace_back(stored.wide());
      continue;
    }
    const std::span<float> copy = params.scratch->span().subspan(position, numel);
    Numbers(copy, space).copy_from(stored);
    params.views.emplace_back(copy);
    position += numel;
  }
  return params;
}

// With parameter offload the layer's partitions were staged on the device by its CopyH2D.
void ZeroEngine::State::gather_layer(std::size_t owner) {
  const auto [first, last] = tensors_of_layer(owner);
  std::size_t staged = 0;
  for (auto t = first; t < last; ++t) {
    const auto index = std::size_t(t);
    if (layout.tensor_persistent[index]) continue;
    const auto partition = std::size_t(layout.tensor_partition[index]);
    full_[index] = {ledger, Device::Gpu, Component::GatheredParams, param_format, partition * std::size_t(dp)};
    const Numbers source = h2d_staging_.size() > 0 ? h2d_staging_.view(staged, partition) : part_[index].view();
    all_gather(comm, source, full_[index].view());
    staged += partition;
  }
  h2d_staging_.reset();
}

void ZeroEngine::State::release_layer(std::size_t owner) {
  const auto [first, last] = tensors_of_layer(owner);
  for (auto t = first; t < last; ++t) {
    if (!layout.tensor_persistent[std::size_t(t)]) full_[std::size_t(t)].reset();
  }
}

// Stage 3 after the step: the updated partitions of persistent tensors are gathered whole again
// (not after a skipped step: nothing changed).
void ZeroEngine::State::gather_persistent() {
  if (overflow_) return;
  for (std::size_t t = 0; t < full_.size(); ++t) {
    if (!layout.tensor_persistent[t]) continue;
    // NVMe parameters: the update put this rank's partition in its block already (in place)
    const auto partition = std::size_t(layout.tensor_partition[t]);
    const Numbers mine = param_store_ ? full_[t].view(std::size_t(rank) * partition, partition) : part_[t].view();
    all_gather(comm, mine, full_[t].view());
  }
}

// Stages 1-2: one shard of the updated partitions, `elements` per rank at the same offset of every
// rank's partition, in the order the schedule lists the shards (none after a skipped step).
// DeepSpeed gathers in place into its flat parameter buffer, so the plan's gather allocates
// nothing; this engine keeps every tensor apart and must gather through staging, which it does in
// slices so that the staging stays small beside the model (an H200 run of GPT-2 124M in fp32 showed
// a whole-shard staging of 1.5x the parameters raising the peak 9.9 % above DeepSpeed's).
void ZeroEngine::State::gather_updated_shard(const Op& op) {
  if (overflow_) return;
  const Elements elements = op.bytes / (Elements(dp) * Elements(element_bytes(param_format)));
  for (Elements done = 0; done < elements; done += kGatherSliceElements) {
    gather_updated_slice(shard_offset_ + done, std::min(kGatherSliceElements, elements - done));
  }
  shard_offset_ += elements;
}

// `elements` per rank from position `offset` of every rank's partition.
void ZeroEngine::State::gather_updated_slice(Elements offset, Elements elements) {
  const Elements partition = layout.flat_partition;
  NumberBuffer mine(ledger, Device::Gpu, Component::GatheredParams, param_format, std::size_t(elements));
  NumberBuffer all(ledger, Device::Gpu, Component::GatheredParams, param_format, std::size_t(elements) * std::size_t(dp));
  read_flat(rank * partition + offset, mine.view());
  all_gather(comm, mine.view(), all.view());
  for (int r = 0; r < dp; ++r) {
    write_flat(r * partition + offset,
               all.view(std::size_t(r) * std::size_t(elements), std::size_t(elements)));
  }
}

// Copies `values` to flat positions first.. of the whole parameters (positions past the last
// parameter are padding and dropped).
void ZeroEngine::State::write_flat(Elements first, Numbers values) {
  for (std::size_t t = 0; t < full_.size(); ++t) {
    const Elements begin = std::max(first, flat_offset_[t]);
    const Elements end = std::min(first + Elements(values.size()), flat_offset_[t] + layout.tensor_numel[t]);
    if (end <= begin) continue;
    full_[t].view(std::size_t(begin - flat_offset_[t]), std::size_t(end - begin))
        .copy_from(values.sub(std::size_t(begin - first), std::size_t(end - begin)));
  }
}

void ZeroEngine::State::read_flat(Elements first, Numbers values) {
  values.fill_zero();
  for (std::size_t t = 0; t < full_.size(); ++t) {
    const Elements begin = std::max(first, flat_offset_[t]);
    const Elements end = std::min(first + Elements(values.size()), flat_offset_[t] + layout.tensor_numel[t]);
    if (end <= begin) continue;
    values.sub(std::size_t(begin - first), std::size_t(end - begin))
        .copy_from(full_[t].view(std::size_t(begin - flat_offset_[t]), std::size_t(end - begin)));
  }
}

// Widened to fp32 from the training dtype (a collective in stage 3, outside the schedule).
std::vector<float> ZeroEngine::State::full_parameters() {
  std::vector<float> values;
  for (std::size_t t = 0; t < layout.tensor_numel.size(); ++t) {
    const auto numel = std::size_t(layout.tensor_numel[t]);
    std::vector<float> whole(numel);
    if (!stage.partitions_parameters() || layout.tensor_persistent[t]) {
      full_[t].read(0, whole);
    } else {
      const auto partition = std::size_t(layout.tensor_partition[t]);
      std::vector<float> padded(partition * std::size_t(dp));
      std::vector<std::uint16_t> bits(param_format == NumberFormat::Fp32 ? 0 : padded.size());
      const Numbers gathered = bits.empty() ? Numbers(std::span<float>(padded)) : Numbers(std::span(bits), param_format);
      const Numbers mine = gathered.sub(std::size_t(rank) * partition, partition);
      if (param_store_) {
        read_param_partition(t, mine);
      } else {
        mine.copy_from(part_[t].view());
      }
      all_gather(comm, mine, gathered);  // in place
      gathered.sub(0, numel).read(whole);
    }
    values.insert(values.end(), whole.begin(), whole.end());
  }
  return values;
}

}  // namespace zerolens::exec
