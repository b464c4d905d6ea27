#include "exec/engine/parameter_store.hpp"

#include <algorithm>
#include <cstddef>
#include <stdexcept>

#include "exec/engine/quantized_messages.hpp"
#include "sim/schedule/zeropp.hpp"

namespace zerolens::exec {

ParameterStore::ParameterStore(EngineContext& context, NvmeSwapper& nvme)
    : ctx_(context),
      nvme_(nvme),
      full_(context.layout.tensor_numel.size()),
      part_(context.layout.tensor_numel.size()),
      part_device_(context.layout.tensor_numel.size(), context.param_device),
      secondary_(context.layout.tensor_numel.size()) {}

// 16-bit training starts from the rounded initial values, and the master from those (a model
// initialised, then cast to half, then copied to fp32 as DeepSpeed does).
void ParameterStore::initialize(LayerModel& net, Numbers master) {
  const ParamLayout& layout = ctx_.layout;
  for (std::size_t t = 0; t < layout.tensor_numel.size(); ++t) {
    const auto numel = std::size_t(layout.tensor_numel[t]);
    std::vector<float> whole(numel);
    net.init_tensor(std::int32_t(t), whole);
    if (!ctx_.stage.partitions_parameters()) {
      full_[t] = {ctx_.ledger, Device::Gpu, Component::ParamsFull, ctx_.param_format, numel};
      full_[t].view().write(whole);
    } else {
      const auto partition = std::size_t(layout.tensor_partition[t]);
      if (ctx_.param_device != Device::Nvme) {
        part_[t] = {ctx_.ledger, ctx_.param_device, Component::ParamsPartition, ctx_.param_format,
                    partition};
      }
      const ParamSpace& space = ctx_.space_of(t);
      const std::size_t first = std::min(numel, std::size_t(space.rank) * partition);
      const std::size_t count = std::min(numel, first + partition) - first;
      set_partition(t, std::span<const float>(whole).subspan(first, count));
      if (ctx_.has_master &&
          nvme_.params_in_files()) {  // the partition is in the swap buffer still
        master.sub(std::size_t(ctx_.offsets.partition[t]), count)
            .copy_from(nvme_.param_buffer(count));
      }
      if (layout.tensor_persistent[t]) {
        full_[t] = {ctx_.ledger, Device::Gpu, Component::ParamsPersistent, ctx_.param_format,
                    partition * std::size_t(space.ranks)};
        full_[t].view(0, numel).write(whole);
      }
    }
  }
  if (!ctx_.has_master || nvme_.params_in_files()) return;
  for (const OwnedSegment& segment : ctx_.segments) {
    master.sub(std::size_t(segment.owned_offset), std::size_t(segment.length))
        .copy_from(device_params(segment));
  }
}

// A tensor's stage-3 partition (values beyond the tensor are padding, zero), wherever it lives.
void ParameterStore::set_partition(std::size_t tensor, std::span<const float> values) {
  const auto partition = std::size_t(ctx_.layout.tensor_partition[tensor]);
  const Numbers target =
      nvme_.params_in_files() ? nvme_.param_buffer(partition) : part_[tensor].view();
  target.fill_zero();
  target.sub(0, values.size()).write(values);
  if (nvme_.params_in_files()) nvme_.write_param_partition(tensor, target);
}

Numbers ParameterStore::device_params(const OwnedSegment& segment) {
  const auto t = std::size_t(segment.tensor);
  if (!ctx_.stage.partitions_parameters())
    return full_[t].view(std::size_t(segment.begin), std::size_t(segment.length));
  const Elements first = segment.begin - ctx_.space_of(t).rank * ctx_.layout.tensor_partition[t];
  return part_[t].view(std::size_t(first), std::size_t(segment.length));
}

// fp32 parameters are handed over in place; 16-bit ones as one fp32 scratch copy of the layer.
LayerParams ParameterStore::layer_params(std::size_t owner) {
  const ParamLayout& layout = ctx_.layout;
  LayerParams params;
  const auto [first, last] = ctx_.tensors_of_layer(owner);
  Elements total = 0;
  for (auto t = first; t < last; ++t) {
    if (full_[std::size_t(t)].size() == 0 && layout.tensor_numel[std::size_t(t)] > 0) {
      throw std::logic_error("schedule error: layer " + ctx_.model.layers[owner].name +
                             " used before its gather");
    }
    total += layout.tensor_numel[std::size_t(t)];
  }
  if (ctx_.param_format != NumberFormat::Fp32)
    params.scratch.emplace(ctx_.ledger, Device::Gpu, std::size_t(total));
  MemorySpace* const space = ctx_.ledger.space(Device::Gpu);
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

// With parameter offload the layer's partitions were staged on the device by its CopyH2D. hpZ's
// secondary partitions are consecutive blocks of the gathered tensor, in the rank order of the
// secondary group (consecutive data-parallel ranks).
void ParameterStore::gather_layer(std::size_t owner, bool from_secondary) {
  if (ctx_.schedule.context.quantized_weights) {
    if (from_secondary) throw std::logic_error("qwZ with hpZ is refused before the engine runs");
    return gather_layer_quantized(owner);
  }
  const auto [first, last] = ctx_.tensors_of_layer(owner);
  if (from_secondary) {
    Communicator* group = ctx_.groups->secondary();
    for (auto t = std::size_t(first); t < std::size_t(last); ++t) {
      if (ctx_.layout.tensor_persistent[t]) continue;
      if (group == nullptr || secondary_[t].size() == 0)
        throw std::logic_error("schedule error: an hpZ gather of " + ctx_.model.layers[owner].name +
                               " without its secondary partition");
      full_[t] = {ctx_.ledger, Device::Gpu, Component::GatheredParams, ctx_.param_format,
                  secondary_[t].size() * std::size_t(group->size())};
      all_gather(*group, secondary_[t].view(), full_[t].view());
    }
    return;
  }
  std::size_t staged = 0;
  for (auto t = first; t < last; ++t) {
    const auto index = std::size_t(t);
    if (ctx_.layout.tensor_persistent[index]) continue;
    const auto partition = std::size_t(ctx_.layout.tensor_partition[index]);
    const ParamSpace& space = ctx_.space_of(index);  // an expert over its own group
    full_[index] = {ctx_.ledger, Device::Gpu, Component::GatheredParams, ctx_.param_format,
                    partition * std::size_t(space.ranks)};
    all_gather(*space.comm, staged_partition(index, staged), full_[index].view());
  }
  h2d_staging_.reset();
}

// A tensor's partition where the gather reads it: staged by the CopyH2D (offload), or in place.
Numbers ParameterStore::staged_partition(std::size_t tensor, std::size_t& staged) {
  const auto partition = std::size_t(ctx_.layout.tensor_partition[tensor]);
  const Numbers source =
      h2d_staging_.size() > 0 ? h2d_staging_.view(staged, partition) : part_[tensor].view();
  staged += partition;
  return source;
}

// ZeRO++ qwZ (partition_parameters.py, CUDAQuantizer): this rank's partitions of the layer,
// concatenated, go out as int8 blocks and their fp32 scales (qwz_scale_groups of them: the
// schedule's qwz_send_bytes), quantized straight into this rank's block of the gathered bytes
// and gathered in place; every rank's block is dequantized into one 16-bit flat tensor (fp16, as
// the CUDA dequantize writes it) and each tensor's gathered buffer copied out of it. The int8 and
// 16-bit buffers go with the gather, as the schedule's effects free them.
void ParameterStore::gather_layer_quantized(std::size_t owner) {
  const auto [first, last] = ctx_.tensors_of_layer(owner);
  std::vector<std::size_t> tensors;
  std::size_t sent = 0;
  for (auto t = first; t < last; ++t) {
    if (ctx_.layout.tensor_persistent[std::size_t(t)]) continue;
    tensors.push_back(std::size_t(t));
    sent += std::size_t(ctx_.layout.tensor_partition[std::size_t(t)]);
  }
  const QuantizedLayout layout = quantized_layout(sent, qwz_scale_groups(Elements(sent)), 8);
  const std::size_t message = layout.bytes(), dp = std::size_t(ctx_.dp);
  const std::size_t mine = std::size_t(ctx_.rank) * message;
  PlacedBytes gathered(ctx_.ledger, Device::Gpu, Component::GatheredParams, dp * message);
  const std::span<std::byte> bytes(static_cast<std::byte*>(gathered.data()), dp * message);
  {
    ScratchFloats values(ctx_.ledger, Device::Gpu, sent);
    std::size_t staged = 0;
    for (const std::size_t t : tensors) {
      const std::size_t at = staged;
      const Numbers source = staged_partition(t, staged);
      source.read(values.span().subspan(at, source.size()));
    }
    quantize_into(values.span(), layout, bytes.subspan(mine, message));
  }
  h2d_staging_.reset();
  ctx_.comm.all_gather_bytes(bytes.subspan(mine, message), bytes);
  NumberBuffer dequantized(ctx_.ledger, Device::Gpu, Component::GatheredParams, NumberFormat::Fp16,
                           dp * sent);
  {
    ScratchFloats values(ctx_.ledger, Device::Gpu, sent);
    for (std::size_t r = 0; r < dp; ++r) {
      dequantize_from(bytes.subspan(r * message, message), layout, values.span(), false);
      dequantized.view(r * sent, sent).write(values.span());
    }
  }
  for (const std::size_t t : tensors) {
    full_[t] = {ctx_.ledger, Device::Gpu, Component::GatheredParams, ctx_.param_format,
                std::size_t(ctx_.layout.tensor_partition[t]) * dp};
  }
  for (std::size_t r = 0; r < dp; ++r) {
    std::size_t at = r * sent;
    for (const std::size_t t : tensors) {
      const auto partition = std::size_t(ctx_.layout.tensor_partition[t]);
      full_[t].view(r * partition, partition).copy_from(dequantized.view(at, partition));
      at += partition;
    }
  }
}

void ParameterStore::gather_tensors(std::int32_t first, std::int32_t count) {
  for (auto t = std::size_t(first); t < std::size_t(first + count); ++t) {
    const auto partition = std::size_t(ctx_.layout.tensor_partition[t]);
    const ParamSpace& space = ctx_.space_of(t);
    full_[t] = {ctx_.ledger, Device::Gpu, Component::GatheredParams, ctx_.param_format,
                partition * std::size_t(space.ranks)};
    all_gather(*space.comm, part_[t].view(), full_[t].view());
  }
}

void ParameterStore::move_shards(const Op& op, Device to) {
  auto [first, last] = ctx_.tensors_of_layer(std::size_t(op.layer));
  if (op.tensor_count > 0) first = op.first_tensor, last = op.first_tensor + op.tensor_count;
  for (auto t = std::size_t(first); t < std::size_t(last); ++t) {
    if (part_device_[t] == to || part_[t].size() == 0) continue;
    NumberBuffer moved(ctx_.ledger, to, Component::ParamsPartition, ctx_.param_format,
                       part_[t].size());
    moved.view().copy_from(part_[t].view());
    (to == Device::Gpu ? ctx_.copied.pcie_h2d : ctx_.copied.pcie_d2h) += moved.bytes();
    part_[t] = std::move(moved);
    part_device_[t] = to;
  }
}

// hpZ (partition_parameters.py _partition_param_sec): before the gathered tensor goes, this rank
// copies its block of 1/hpz of it (padding included) into a secondary partition of its own.
void ParameterStore::release_layer(std::size_t owner, SecondaryCopy secondary) {
  const auto [first, last] = ctx_.tensors_of_layer(owner);
  for (auto t = std::size_t(first); t < std::size_t(last); ++t) {
    if (ctx_.layout.tensor_persistent[t]) continue;
    if (secondary == SecondaryCopy::Keep) {
      const Communicator* group = ctx_.groups->secondary();
      if (group == nullptr) throw std::logic_error("schedule error: hpZ without its group");
      const std::size_t block = full_[t].size() / std::size_t(group->size());
      secondary_[t] = {ctx_.ledger, Device::Gpu, Component::ParamsSecondary, ctx_.param_format,
                       block};
      secondary_[t].view().copy_from(full_[t].view(std::size_t(group->rank()) * block, block));
    }
    full_[t].reset();
  }
}

void ParameterStore::drop_secondary() {
  for (NumberBuffer& buffer : secondary_) buffer.reset();
}

// The updated partitions of persistent tensors are gathered whole again.
void ParameterStore::gather_persistent() {
  for (std::size_t t = 0; t < full_.size(); ++t) {
    if (!ctx_.layout.tensor_persistent[t]) continue;
    // NVMe parameters: the update put this rank's partition in its block already (in place)
    const Numbers mine = nvme_.params_in_files() ? persistent_block(t) : part_[t].view();
    all_gather(*ctx_.space_of(t).comm, mine, full_[t].view());
  }
}

Numbers ParameterStore::persistent_block(std::size_t tensor) {
  if (!ctx_.layout.tensor_persistent[tensor]) return {};
  const auto partition = std::size_t(ctx_.layout.tensor_partition[tensor]);
  return full_[tensor].view(std::size_t(ctx_.space_of(tensor).rank) * partition, partition);
}

// One shard of the updated partitions, `elements` per rank at the same offset of every rank's
// partition, in the order the schedule lists the shards. DeepSpeed gathers in place into its flat
// parameter buffer, so the plan's gather allocates nothing; this store keeps every tensor apart and
// must gather through staging, which it does in slices so that the staging stays small beside the
// model (an H200 run of GPT-2 124M in fp32 showed a whole-shard staging of 1.5x the parameters
// raising the peak 9.9 % above DeepSpeed's).
// With expert parallelism the experts' partitions are gathered over their group after the others'
// (the schedule's ExpertData ops): each space's shards are counted apart.
void ParameterStore::gather_updated_shard(const Op& op) {
  const ParamSpace& space = ctx_.space_of(op);
  const bool expert = &space == &ctx_.spaces[1];
  Elements& shard_offset = shard_offset_[expert ? 1 : 0];
  const Elements elements =
      op.bytes / (Elements(space.ranks) * Elements(element_bytes(ctx_.param_format)));
  for (Elements done = 0; done < elements; done += kGatherSliceElements) {
    gather_updated_slice(space, expert, shard_offset + done,
                         std::min(kGatherSliceElements, elements - done));
  }
  shard_offset += elements;
}

// `elements` per rank from position `offset` of every rank's partition of the space.
void ParameterStore::gather_updated_slice(const ParamSpace& space, bool expert, Elements offset,
                                          Elements elements) {
  const Elements partition = space.flat_partition;
  const int ranks = space.ranks;
  NumberBuffer mine(ctx_.ledger, Device::Gpu, Component::GatheredParams, ctx_.param_format,
                    std::size_t(elements));
  NumberBuffer all(ctx_.ledger, Device::Gpu, Component::GatheredParams, ctx_.param_format,
                   std::size_t(elements) * std::size_t(ranks));
  read_flat(expert, space.rank * partition + offset, mine.view());
  all_gather(*space.comm, mine.view(), all.view());
  for (int r = 0; r < ranks; ++r) {
    write_flat(expert, r * partition + offset,
               all.view(std::size_t(r) * std::size_t(elements), std::size_t(elements)));
  }
}

// Copies `values` to positions first.. of the (expert or other) space's flat order of the whole
// parameters (positions past its last parameter are padding and dropped).
void ParameterStore::write_flat(bool expert, Elements first, Numbers values) {
  const std::vector<Elements>& offset = ctx_.offsets.flat;
  for (std::size_t t = 0; t < full_.size(); ++t) {
    if (ctx_.expert(t) != expert) continue;
    const Elements begin = std::max(first, offset[t]);
    const Elements end =
        std::min(first + Elements(values.size()), offset[t] + ctx_.layout.tensor_numel[t]);
    if (end <= begin) continue;
    full_[t]
        .view(std::size_t(begin - offset[t]), std::size_t(end - begin))
        .copy_from(values.sub(std::size_t(begin - first), std::size_t(end - begin)));
  }
}

void ParameterStore::read_flat(bool expert, Elements first, Numbers values) {
  const std::vector<Elements>& offset = ctx_.offsets.flat;
  values.fill_zero();
  for (std::size_t t = 0; t < full_.size(); ++t) {
    if (ctx_.expert(t) != expert) continue;
    const Elements begin = std::max(first, offset[t]);
    const Elements end =
        std::min(first + Elements(values.size()), offset[t] + ctx_.layout.tensor_numel[t]);
    if (end <= begin) continue;
    values.sub(std::size_t(begin - first), std::size_t(end - begin))
        .copy_from(full_[t].view(std::size_t(begin - offset[t]), std::size_t(end - begin)));
  }
}

// The staging buffer the schedule allocates (OffloadStaging) and its gather frees.
void ParameterStore::stage_layer_partition(std::size_t owner) {
  if (h2d_staging_.size() > 0)
    throw std::logic_error("schedule error: two parameter copies before one gather");
  const auto [first, last] = ctx_.tensors_of_layer(owner);
  std::size_t elements = 0;
  for (auto t = first; t < last; ++t) {
    if (!ctx_.layout.tensor_persistent[std::size_t(t)])
      elements += std::size_t(ctx_.layout.tensor_partition[std::size_t(t)]);
  }
  h2d_staging_ = {ctx_.ledger, Device::Gpu, Component::OffloadStaging, ctx_.param_format, elements};
  if (nvme_.params_in_files()) {  // the layer's NvmeRead put its partitions in the swap buffer, in
                                  // this order
    nvme_.finish_param_io();
    h2d_staging_.view().copy_from(nvme_.param_buffer(elements));
    ctx_.copied.pcie_h2d += h2d_staging_.bytes();
    return;
  }
  std::size_t position = 0;
  for (auto t = first; t < last; ++t) {
    if (ctx_.layout.tensor_persistent[std::size_t(t)]) continue;
    const Numbers partition = part_[std::size_t(t)].view();
    h2d_staging_.view(position, partition.size()).copy_from(partition);
    position += partition.size();
  }
  ctx_.copied.pcie_h2d += h2d_staging_.bytes();
}

// The bytes crossing are the training dtype's, as DeepSpeed's host Adam writes them: stage 3 copies
// whole partitions, padding included; stages 1-2 the owned segments (the last rank's padding is
// not stored).
void ParameterStore::write_back(Numbers master, bool written) {
  if (ctx_.stage.partitions_parameters()) {
    for (std::size_t t = 0; t < part_.size(); ++t) {
      if (!written)
        part_[t].view().copy_from(
            master.sub(std::size_t(ctx_.offsets.partition[t]), part_[t].size()));
      // (ColossalAI's Gemini may hold a shard in host memory: copied there, not over PCIe.)
      if (part_device_[t] == Device::Gpu) ctx_.copied.pcie_h2d += part_[t].bytes();
    }
    return;
  }
  for (const OwnedSegment& segment : ctx_.segments) {
    const Numbers params = device_params(segment);
    if (!written)
      params.copy_from(master.sub(std::size_t(segment.owned_offset), std::size_t(segment.length)));
    ctx_.copied.pcie_h2d += params.bytes();
  }
}

// In place on the host (or device, counted by the CopyH2D after), or streamed to NVMe by tensor.
void ParameterStore::store_updated(const OptimizerRange& range) {
  const Elements end = range.begin + Elements(range.master.size());
  if (nvme_.params_in_files()) {
    const std::vector<Elements>& offset = ctx_.offsets.partition;
    for (std::size_t t = 0; t < ctx_.layout.tensor_partition.size(); ++t) {
      const Elements first = std::max(range.begin, offset[t]);
      const Elements last = std::min(end, offset[t] + ctx_.layout.tensor_partition[t]);
      if (last <= first) continue;
      nvme_.stream_param_partition(
          t, first - offset[t],
          range.master.subspan(std::size_t(first - range.begin), std::size_t(last - first)),
          persistent_block(t));
    }
    return;
  }
  for (const OwnedSegment& whole : ctx_.segments) {
    const OwnedSegment segment = clip(whole, range.begin, end);
    if (segment.length == 0) continue;
    device_params(segment).write(range.master.subspan(
        std::size_t(segment.owned_offset - range.begin), std::size_t(segment.length)));
  }
}

std::vector<float> ParameterStore::full_parameters() {
  const ParamLayout& layout = ctx_.layout;
  std::vector<float> values;
  for (std::size_t t = 0; t < layout.tensor_numel.size(); ++t) {
    const auto numel = std::size_t(layout.tensor_numel[t]);
    std::vector<float> whole(numel);
    if (!ctx_.stage.partitions_parameters() || layout.tensor_persistent[t]) {
      full_[t].read(0, whole);
    } else {
      const auto partition = std::size_t(layout.tensor_partition[t]);
      const ParamSpace& space = ctx_.space_of(t);
      std::vector<float> padded(partition * std::size_t(space.ranks));
      std::vector<std::uint16_t> bits(ctx_.param_format == NumberFormat::Fp32 ? 0 : padded.size());
      const Numbers gathered = bits.empty() ? Numbers(std::span<float>(padded))
                                            : Numbers(std::span(bits), ctx_.param_format);
      const Numbers mine = gathered.sub(std::size_t(space.rank) * partition, partition);
      if (nvme_.params_in_files()) {
        nvme_.read_param_partition(t, mine);
      } else {
        mine.copy_from(part_[t].view());
      }
      all_gather(*space.comm, mine, gathered);  // in place
      gathered.sub(0, numel).read(whole);
    }
    values.insert(values.end(), whole.begin(), whole.end());
  }
  return values;
}

// The training-dtype parameters are the master weights rounded (16-bit) or themselves (fp32).
void ParameterStore::restore(const FullState& state) {
  for (std::size_t t = 0; t < ctx_.layout.tensor_numel.size(); ++t) {
    const std::vector<float>& whole = state.master[t];
    if (!ctx_.stage.partitions_parameters() || ctx_.layout.tensor_persistent[t])
      full_[t].view(0, whole.size()).write(whole);
    if (!ctx_.stage.partitions_parameters()) continue;
    const auto partition = std::size_t(ctx_.layout.tensor_partition[t]);
    const std::size_t first =
        std::min(whole.size(), std::size_t(ctx_.space_of(t).rank) * partition);
    const std::size_t count = std::min(whole.size(), first + partition) - first;
    set_partition(t, std::span(whole).subspan(first, count));
  }
}

}  // namespace zerolens::exec
