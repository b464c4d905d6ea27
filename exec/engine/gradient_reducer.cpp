#include "exec/engine/gradient_reducer.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace zerolens::exec {

void LayerGrads::commit() {
  for (std::size_t i = 0; i < storage.size(); ++i)
    storage[i].copy_from(Numbers(views[i], scratch->view().space()));
}

GradientReducer::GradientReducer(EngineContext& context)
    : ctx_(context), grads_(context.layout.tensor_numel.size()) {
  if (ctx_.schedule.context.quantized_gradients) split_quantized_groups();
}

void GradientReducer::allocate_resident() {
  const auto owned_elements = std::size_t(ctx_.layout.owned);
  if (ctx_.host_optimizer()) {
    host_grads_ = {ctx_.ledger, Device::Cpu, Component::GradsPartition, owned_elements};
  } else if (ctx_.stage.partitions_parameters()) {
    grad_part_ = {ctx_.ledger, Device::Gpu, Component::GradsPartition, ctx_.grad_format,
                  owned_elements};
  }
  for (const MemEffect& effect : ctx_.schedule.resident) {
    if (effect.device == Device::Gpu && effect.component == Component::ReduceBucket) {
      reduce_buffer_ = {ctx_.ledger, Device::Gpu, Component::ReduceBucket, ctx_.grad_format,
                        std::size_t(effect.bytes) / element_bytes(ctx_.grad_format)};
    }
  }
}

// Stages 0-1 keep whole gradients until the boundary; stages 2-3 hold them only until their bucket
// is reduced (the schedule's UnreducedGrads). 16-bit gradients are accumulated through an fp32
// copy of the layer's (rounded back by commit(), as a 16-bit gradient accumulates).
LayerGrads GradientReducer::layer_grads(std::size_t owner) {
  const Component component =
      ctx_.stage.reduces_at_boundary() ? Component::GradsFull : Component::UnreducedGrads;
  LayerGrads grads;
  const auto [first, last] = ctx_.tensors_of_layer(owner);
  Elements total = 0;
  for (auto t = first; t < last; ++t) {
    auto& buffer = grads_[std::size_t(t)];
    const auto numel = std::size_t(ctx_.layout.tensor_numel[std::size_t(t)]);
    if (buffer.size() == 0) buffer = {ctx_.ledger, Device::Gpu, component, ctx_.grad_format, numel};
    total += Elements(numel);
  }
  if (ctx_.grad_format != NumberFormat::Fp32)
    grads.scratch.emplace(ctx_.ledger, Device::Gpu, std::size_t(total));
  std::size_t position = 0;
  for (auto t = first; t < last; ++t) {
    const Numbers stored = grads_[std::size_t(t)].view();
    if (!grads.scratch) {
      grads.views.push_back(stored.wide());
      continue;
    }
    const std::span<float> copy = grads.scratch->span().subspan(position, stored.size());
    Numbers(copy, grads.scratch->view().space()).copy_from(stored);
    grads.views.push_back(copy);
    grads.storage.push_back(stored);
    position += stored.size();
  }
  return grads;
}

void GradientReducer::inject_inf(std::int32_t tensor, Elements element) {
  const float inf = std::numeric_limits<float>::infinity();
  grads_[std::size_t(tensor)].view(std::size_t(element), 1).write(std::span(&inf, 1));
}

void GradientReducer::ensure_grad_partition() {
  if (grad_part_.size() == 0) {
    grad_part_ = {ctx_.ledger, Device::Gpu, Component::GradsPartition, ctx_.grad_format,
                  std::size_t(ctx_.layout.owned)};
  }
}

// The persistent reduce buffer where the schedule has one and it is large enough; otherwise a
// transient flattened copy, as the schedule's reduce op allocates it.
Numbers GradientReducer::staging(std::size_t elements, NumberBuffer& transient) {
  if (reduce_buffer_.size() >= elements) return reduce_buffer_.view(0, elements);
  transient = {ctx_.ledger, Device::Gpu, Component::ReduceBucket, ctx_.grad_format, elements};
  return transient.view();
}

// Allocated by an op other than a reduction (the first backward of stages 1-2, initialisation in
// stage 3), freed after the update.
void GradientReducer::follow_reduce_buffer(const Op& op, bool allocations) {
  if (op.kind == OpKind::AllReduce || op.kind == OpKind::ReduceScatter ||
      op.kind == OpKind::AllToAll)
    return;  // their copies are transient
  for (const MemEffect& effect : ctx_.schedule.effects_of(op)) {
    if (effect.device != Device::Gpu || effect.component != Component::ReduceBucket) continue;
    if ((effect.bytes > 0) != allocations) continue;
    if (effect.bytes > 0 && reduce_buffer_.size() == 0) {
      reduce_buffer_ = {ctx_.ledger, Device::Gpu, Component::ReduceBucket, ctx_.grad_format,
                        std::size_t(effect.bytes) / element_bytes(ctx_.grad_format)};
    } else if (effect.bytes < 0) {
      reduce_buffer_.reset();
    }
  }
}

bool GradientReducer::reduce_buffer_comes_first(const Op& op) const {
  const auto effects = ctx_.schedule.effects_of(op);
  return !effects.empty() && effects.front().device == Device::Gpu &&
         effects.front().component == Component::ReduceBucket && effects.front().bytes > 0;
}

// A bucket holds one kind of tensor (sim's builder closes a bucket where the kind changes) and is
// reduced over that kind's group: the schedule's op names it (ExpertData for experts).
const ParamSpace& GradientReducer::bucket_space(const Op& op,
                                                std::span<const std::int32_t> tensors) const {
  const ParamSpace& space = ctx_.space_of(op);
  for (const auto t : tensors) {
    if (&ctx_.space_of(std::size_t(t)) != &space) {
      throw std::logic_error(std::string("schedule error: a gradient bucket over the ") +
                             to_string(op.group) + " group holds a tensor of the other kind");
    }
  }
  return space;
}

void GradientReducer::reduce_bucket(const Op& op) {
  const Bucket& bucket = ctx_.schedule.buckets.at(std::size_t(op.bucket));
  const auto tensors = ctx_.schedule.tensors_of(bucket);
  if (ctx_.schedule.context.quantized_gradients) {
    reduce_bucket_stage3(ctx_.spaces[0],
                         bucket_tensors(op, /*quantized=*/false));  // qgZ's 1-D and odd ones
  } else if (ctx_.stage.partitions_parameters()) {
    reduce_bucket_stage3(bucket_space(op, tensors), tensors);
  } else {
    reduce_bucket_flat(op, {tensors.begin(), tensors.end()});
  }
}

// Stage 3: rank r of the bucket's group receives the sum of every tensor's r-th partition (tensors
// padded to a partition per rank of their group).
void GradientReducer::reduce_bucket_stage3(const ParamSpace& space,
                                           std::span<const std::int32_t> tensors) {
  const ParamLayout& layout = ctx_.layout;
  Elements block = 0;
  for (const auto t : tensors) block += layout.tensor_partition[std::size_t(t)];
  NumberBuffer transient;
  const Numbers input = staging(std::size_t(block * space.ranks), transient);
  input.fill_zero();
  std::size_t position = 0;
  for (int r = 0; r < space.ranks; ++r) {
    for (const auto t : tensors) {
      const auto numel = std::size_t(layout.tensor_numel[std::size_t(t)]);
      const auto partition = std::size_t(layout.tensor_partition[std::size_t(t)]);
      const std::size_t first = std::min(numel, std::size_t(r) * partition);
      const std::size_t count = std::min(numel, first + partition) - first;
      input.sub(position, count).copy_from(grads_[std::size_t(t)].view(first, count));
      position += partition;
    }
  }
  scatter_output_ = {ctx_.ledger, Device::Gpu, Component::ReduceBucket, ctx_.grad_format,
                     std::size_t(block)};
  reduce_scatter_sum(*space.comm, input, scatter_output_.view());
  std::vector<OwnedRun> runs;
  for (const auto t : tensors) {
    runs.push_back(
        {ctx_.offsets.partition[std::size_t(t)], layout.tensor_partition[std::size_t(t)]});
    grads_[std::size_t(t)].reset();
  }
  keep_reduced(scatter_output_.view(), std::move(runs), average_over(space));
  scatter_output_.reset();
}

// Stages 0-2: a bucket is a contiguous run of its space's flat order. Stage 0 all-reduces it in
// place; stages 1-2 keep the part inside this rank's partition of the space (all-reduce or
// reduce-scatter, as the schedule says).
void GradientReducer::reduce_bucket_flat(const Op& op, std::vector<std::int32_t> tensors) {
  const ZeroStage stage = ctx_.stage;
  const std::vector<Elements>& offset = ctx_.offsets.flat;
  std::sort(tensors.begin(), tensors.end());
  if (tensors.back() - tensors.front() + 1 != std::int32_t(tensors.size())) {
    throw std::logic_error(
        "schedule error: a stage 0-2 gradient bucket is not a contiguous run of tensors");
  }
  const ParamSpace& space = bucket_space(op, tensors);
  const Elements first = offset[std::size_t(tensors.front())];
  const Elements last =
      offset[std::size_t(tensors.back())] + ctx_.layout.tensor_numel[std::size_t(tensors.back())];
  NumberBuffer transient;
  // Stage 2 reduces a gradient larger than the reduce buffer where autograd put it, as DeepSpeed
  // does (stage_1_and_2.py reduce_ipg_grads: extra_large_param_to_reduce), and as the schedule
  // plans it: no flattened copy.
  const bool in_place = stage.partitions_gradients_not_parameters() && tensors.size() == 1 &&
                        reduce_buffer_.size() < std::size_t(last - first);
  const Numbers bucket = in_place ? grads_[std::size_t(tensors.front())].view()
                                  : staging(std::size_t(last - first), transient);
  const auto in_bucket = [&](std::int32_t t) {
    return bucket.sub(std::size_t(offset[std::size_t(t)] - first), grads_[std::size_t(t)].size());
  };
  if (!in_place) {
    for (const auto t : tensors) in_bucket(t).copy_from(grads_[std::size_t(t)].view());
  }
  const float average = average_over(space);
  if (!stage.partitions_optimizer_states()) {
    all_reduce_sum(*space.comm, bucket);
    for (const auto t : tensors) {
      grads_[std::size_t(t)].view().fill_zero();
      grads_[std::size_t(t)].view().add_scaled(in_bucket(t), average);
    }
    return;
  }
  if (stage.partitions_gradients_not_parameters() && ctx_.optimizer_device == Device::Gpu)
    ensure_grad_partition();
  const Elements partition = space.flat_partition;
  const int rank = space.rank;
  const Elements mine_begin = std::max(first, rank * partition);
  const Elements mine = std::max<Elements>(0, std::min(last, (rank + 1) * partition) - mine_begin);
  // The bucket's gradients are in the staging copy now; stage 1 frees them before keeping its part
  // (the schedule's order: the same bytes change category).
  if (stage.partitions_only_optimizer_states()) {
    for (const auto t : tensors) grads_[std::size_t(t)].reset();
  }
  const Numbers reduced = reduce_flat(op, space, bucket, first, last);
  const Numbers owned = reduced.sub(
      op.kind == OpKind::ReduceScatter ? 0 : std::size_t(mine_begin - first), std::size_t(mine));
  keep_reduced(owned, {{space.owned_base + mine_begin - rank * partition, mine}}, average);
  for (const auto t : tensors) grads_[std::size_t(t)].reset();
  scatter_output_.reset();
}

// Reduce-scatter leaves this rank's part in a transient output (returned); all-reduce leaves the
// whole reduced bucket in place (returned).
Numbers GradientReducer::reduce_flat(const Op& op, const ParamSpace& space, Numbers bucket,
                                     Elements first, Elements last) {
  if (op.kind != OpKind::ReduceScatter) {
    all_reduce_sum(*space.comm, bucket);
    return bucket;
  }
  const Elements partition = space.flat_partition;
  std::vector<int> counts;
  for (int r = 0; r < space.ranks; ++r) {
    counts.push_back(int(std::max<Elements>(
        0, std::min(last, (r + 1) * partition) - std::max(first, r * partition))));
  }
  scatter_output_ = {ctx_.ledger, Device::Gpu, Component::ReduceBucket, ctx_.grad_format,
                     std::size_t(counts[std::size_t(space.rank)])};
  reduce_scatter_sum(*space.comm, bucket, counts, scatter_output_.view());
  return scatter_output_.view();
}

// The mean over the ranks a space's gradients are summed over: the whole data-parallel group
// (with its replicas under hybrid sharding), or the expert-data-parallel group for experts.
float GradientReducer::average_over(const ParamSpace& space) const {
  return 1.0f / float(&space == &ctx_.spaces[1] ? space.ranks : ctx_.data_parallel);
}

// The reduced sums this rank owns (runs of its partition, in order): times `average` into the
// device partition, or, with the optimizer on the host, held until the schedule's CopyD2H moves
// them.
void GradientReducer::keep_reduced(Numbers reduced, std::vector<OwnedRun> runs, float average) {
  if (ctx_.host_optimizer()) {
    Reduced part{
        {ctx_.ledger, Device::Gpu, Component::ReduceBucket, ctx_.grad_format, reduced.size()},
        std::move(runs),
        average};
    part.values.view().copy_from(reduced);
    reduced_.push_back(std::move(part));
    return;
  }
  std::size_t read = 0;
  for (const OwnedRun& run : runs) {
    const Numbers target =
        ctx_.stage.partitions_only_optimizer_states()
            ? new_grad_chunk(run.owned_offset, run.length)
            : grad_part_.view(std::size_t(run.owned_offset), std::size_t(run.length));
    target.add_scaled(reduced.sub(read, std::size_t(run.length)), average);
    read += std::size_t(run.length);
  }
}

// Stage 1 keeps each bucket's reduced part in its own buffer (as DeepSpeed keeps a list of
// partitioned gradient tensors), so the partition grows bucket by bucket as the full gradients go.
Numbers GradientReducer::new_grad_chunk(Elements owned_begin, Elements length) {
  if (length <= 0) return {};
  grad_chunks_.push_back(
      {owned_begin, NumberBuffer(ctx_.ledger, Device::Gpu, Component::GradsPartition,
                                 ctx_.grad_format, std::size_t(length))});
  return grad_chunks_.back().values.view();
}

// Megatron all-reduces these tensors' whole gradients in one flat buffer (_flatten_dense_tensors
// of their main_grad, which the distributed optimizer keeps whole): the buffer here holds every
// SP tensor's elements, this rank's owned ones filled in (stages 1-3 keep no others; the TP group's
// ranks own the same elements, their DP coordinate being the same), and is all-reduced as the
// schedule sizes it; the owned elements are read back.
void GradientReducer::all_reduce_sequence_parallel(const Op& op) {
  Communicator* tensor = ctx_.groups->tensor();
  if (tensor == nullptr) throw std::logic_error("schedule error: a TP all-reduce without TP");
  std::vector<Elements> at(ctx_.layout.tensor_numel.size(), -1);
  Elements total = 0;
  for (std::size_t t = 0; t < at.size(); ++t) {
    if (!ctx_.sequence_parallel_grad[t]) continue;
    at[t] = total;
    total += ctx_.layout.tensor_numel[t];
  }
  if (total * Elements(element_bytes(ctx_.grad_format)) != op.bytes) {
    throw std::logic_error("schedule error: the SP gradients are " + std::to_string(total) +
                           " elements, the schedule all-reduces " + std::to_string(op.bytes) +
                           " bytes");
  }
  NumberBuffer flat(ctx_.ledger, Device::Gpu, Component::ReduceBucket, ctx_.grad_format,
                    std::size_t(total));
  const auto place = [&](const OwnedSegment& segment) {
    return flat.view(std::size_t(at[std::size_t(segment.tensor)] + segment.begin),
                     std::size_t(segment.length));
  };
  for (const OwnedSegment& segment : ctx_.segments) {
    if (at[std::size_t(segment.tensor)] >= 0) place(segment).copy_from(owned_grads(segment));
  }
  all_reduce_sum(*tensor, flat.view());
  for (const OwnedSegment& segment : ctx_.segments) {
    if (at[std::size_t(segment.tensor)] >= 0) owned_grads(segment).copy_from(place(segment));
  }
}

void GradientReducer::all_reduce_tied_embedding(const Op& op) {
  Communicator* ends = ctx_.groups->embedding();
  if (ends == nullptr) throw std::logic_error("schedule error: a tied embedding on a middle stage");
  if (!ctx_.stage.reduces_at_boundary())
    throw std::logic_error("schedule error: tied embedding gradients after their reduction");
  // The word embeddings: the embedding layer's first tensor, or the LM head's copy.
  std::int32_t tensor = -1;
  for (std::size_t layer = 0; layer < ctx_.model.layers.size(); ++layer) {
    const Layer& spec = ctx_.model.layers[layer];
    if ((spec.kind == LayerKind::Embedding || spec.kind == LayerKind::LmHead) &&
        !spec.params.empty())
      tensor = ctx_.layout.layer_first_tensor[layer];
  }
  if (tensor < 0) throw std::logic_error("schedule error: no word embeddings on this stage");
  NumberBuffer& grad = grads_[std::size_t(tensor)];
  if (grad.bytes() != op.bytes) {
    throw std::logic_error("schedule error: the tied embedding's gradient is " +
                           std::to_string(grad.bytes()) + " bytes, the schedule all-reduces " +
                           std::to_string(op.bytes));
  }
  all_reduce_sum(*ends, grad.view());
}

// Runs of the partition next to each other are all-reduced as one.
void GradientReducer::all_reduce_replicas(const Op& op) {
  Communicator* replicas = ctx_.groups->replicate();
  if (replicas == nullptr || !ctx_.stage.partitions_parameters() || grad_part_.size() == 0)
    throw std::logic_error("schedule error: a replicate all-reduce without hybrid sharding");
  const Bucket& bucket = ctx_.schedule.buckets.at(std::size_t(op.bucket));
  std::vector<OwnedRun> runs;
  for (const auto t : ctx_.schedule.tensors_of(bucket))
    runs.push_back(
        {ctx_.offsets.partition[std::size_t(t)], ctx_.layout.tensor_partition[std::size_t(t)]});
  std::sort(runs.begin(), runs.end(),
            [](const OwnedRun& a, const OwnedRun& b) { return a.owned_offset < b.owned_offset; });
  Elements total = 0;
  for (std::size_t i = 0; i < runs.size();) {
    OwnedRun merged = runs[i];
    for (++i; i < runs.size() && runs[i].owned_offset == merged.owned_offset + merged.length; ++i)
      merged.length += runs[i].length;
    all_reduce_sum(*replicas,
                   grad_part_.view(std::size_t(merged.owned_offset), std::size_t(merged.length)));
    total += merged.length;
  }
  if (total * Elements(element_bytes(ctx_.grad_format)) != op.bytes) {
    throw std::logic_error("schedule error: the bucket's partitions are " + std::to_string(total) +
                           " elements, the schedule all-reduces " + std::to_string(op.bytes) +
                           " bytes over the replicas");
  }
}

// Averaged over ranks and added to the fp32 host partition (accumulating over micro-steps).
void GradientReducer::copy_to_host(const Op& op) {
  if (op.bucket < 0) throw std::logic_error("the CPU executor copies only gradients to the host");
  for (Reduced& part : reduced_) {
    std::size_t read = 0;
    for (const OwnedRun& run : part.runs) {
      const Numbers host(
          host_grads_.span().subspan(std::size_t(run.owned_offset), std::size_t(run.length)));
      host.add_scaled(part.values.view(read, std::size_t(run.length)), part.average);
      read += std::size_t(run.length);
    }
    ctx_.copied.pcie_d2h += part.values.bytes();
  }
  reduced_.clear();
}

Numbers GradientReducer::owned_grads(const OwnedSegment& segment) {
  const auto length = std::size_t(segment.length);
  if (ctx_.host_optimizer())
    return Numbers(host_grads_.span().subspan(std::size_t(segment.owned_offset), length));
  if (!ctx_.stage.partitions_optimizer_states())
    return grads_[std::size_t(segment.tensor)].view(std::size_t(segment.begin), length);
  if (!ctx_.stage.partitions_only_optimizer_states())
    return grad_part_.view(std::size_t(segment.owned_offset), length);
  for (auto& chunk : grad_chunks_) {
    const Elements offset = segment.owned_offset - chunk.begin;
    if (offset >= 0 && offset < Elements(chunk.values.size()))
      return chunk.values.view(std::size_t(offset), length);
  }
  throw std::logic_error("schedule error: an owned gradient was in no reduced bucket");
}

void GradientReducer::free_step_gradients() {
  if (!ctx_.stage.partitions_optimizer_states()) {
    for (auto& grad : grads_) grad.reset();
  } else if (ctx_.stage.uses_flat_partition()) {
    grad_part_.reset();
    grad_chunks_.clear();
  }
  if (ctx_.stage.partitions_parameters() && grad_part_.size() > 0) grad_part_.view().fill_zero();
  std::fill(host_grads_.data(), host_grads_.data() + host_grads_.size(), 0.0f);
}

}  // namespace zerolens::exec
