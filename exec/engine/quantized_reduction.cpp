// ZeRO++ qgZ in the gradient reducer: DeepSpeed's all_to_all_quant_reduce
// (runtime/comm/coalesced_collectives.py, with csrc/quantization's swizzled_quantize.cu and
// quant_reduce.cu) over the data-parallel group of W ranks, D on each of N nodes, rank r on node
// r / D with local index r % D, owning partition r (n / W elements) of every tensor.
//   Node hop: the tensor's n elements are quantized to int4 in G = max(rows, cols, W) groups
//   (sim's qgz_tensor) and reordered so that the block for local index l holds the partitions of
//   the ranks with that index on every node (k D + l for k = 0..N-1: the swizzle); an all-to-all
//   among the node's ranks gives rank l the blocks its node-mates made for it, which it
//   dequantizes and sums (n / D elements).
//   Cross-node hop: that sum is quantized again in G / D groups, node k's partition in block k,
//   exchanged among the ranks of local index l on every node, dequantized and summed: the sum of
//   partition r over all W ranks, averaged like the reduce-scatter's.
// One all-to-all per hop and tensor carries the int4 codes and fp32 scales of each destination
// together (DeepSpeed sends them in two calls: the same bytes). Sums are in fp32; DeepSpeed sums
// in fp16 and divides by the node count only at the end.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "exec/engine/gradient_reducer.hpp"
#include "exec/engine/quantized_messages.hpp"
#include "sim/core/error.hpp"

namespace zerolens::exec {
namespace {

constexpr int kGradientBits = 4;

std::span<std::byte> bytes_of(PlacedBytes& buffer) {
  return {static_cast<std::byte*>(buffer.data()), buffer.size()};
}

}  // namespace

// Collective over the data-parallel group (every rank constructs its reducer).
void GradientReducer::split_quantized_groups() {
  ranks_per_node_ = ctx_.schedule.context.data_parallel_ranks_per_node();
  nodes_ = ctx_.dp / ranks_per_node_;
  const int rank = ctx_.rank;
  node_ = ctx_.comm.split(rank / ranks_per_node_, rank);
  if (nodes_ > 1) cross_node_ = ctx_.comm.split(rank % ranks_per_node_, rank);
  if (!node_ || (nodes_ > 1 && !cross_node_)) {
    throw InputError("--quantized-gradients",
                     "qgZ's node and cross-node groups need a communicator that can split "
                     "(MPI's: run on --device cpu)");
  }
  for (std::size_t t = 0; t < ctx_.layout.tensor_numel.size(); ++t) {
    const QgzTensor q = quantized_tensor(std::int32_t(t));
    if (!q.quantized || q.node_groups % ctx_.dp == 0) continue;
    const std::size_t layer = std::size_t(ctx_.layout.tensor_layer[t]);
    throw InputError("--quantized-gradients",
                     "a gradient of " + ctx_.model.layers[layer].name + " is quantized in " +
                         std::to_string(q.node_groups) +
                         " groups (max(rows, cols, ranks)), "
                         "which do not split over the " +
                         std::to_string(ctx_.dp) +
                         " data-parallel ranks' partitions (DeepSpeed's swizzled quantization "
                         "assumes they do)");
  }
}

QgzTensor GradientReducer::quantized_tensor(std::int32_t tensor) const {
  const auto layer = std::size_t(ctx_.layout.tensor_layer[std::size_t(tensor)]);
  const auto first = ctx_.layout.layer_first_tensor[layer];
  const TensorSpec& spec = ctx_.model.layers[layer].params[std::size_t(tensor - first)];
  return qgz_tensor(spec.shape, ctx_.dp, ranks_per_node_);
}

std::vector<std::int32_t> GradientReducer::bucket_tensors(const Op& op, bool quantized) const {
  const Bucket& bucket = ctx_.schedule.buckets.at(std::size_t(op.bucket));
  std::vector<std::int32_t> chosen;
  for (const std::int32_t t : ctx_.schedule.tensors_of(bucket)) {
    if (quantized_tensor(t).quantized == quantized) chosen.push_back(t);
  }
  return chosen;
}

void GradientReducer::quantized_hop(const Op& op) {
  const std::vector<std::int32_t> tensors = bucket_tensors(op, /*quantized=*/true);
  if (op.group == ProcessGroup::NodeLocal) return node_hop(tensors);
  if (op.group == ProcessGroup::CrossNode) return cross_node_hop(tensors);
  throw std::logic_error(std::string("the CPU executor cannot run an all_to_all over the ") +
                         to_string(op.group) + " group");
}

void GradientReducer::node_hop(std::span<const std::int32_t> tensors) {
  const auto ranks = std::size_t(ctx_.dp), local = std::size_t(ranks_per_node_);
  const auto nodes = std::size_t(nodes_);
  for (const std::int32_t t : tensors) {
    const QgzTensor q = quantized_tensor(t);
    const auto n = std::size_t(ctx_.layout.tensor_numel[std::size_t(t)]);
    const std::size_t partition = n / ranks, block = n / local;
    if (Elements(partition) != ctx_.layout.tensor_partition[std::size_t(t)])
      throw std::logic_error("qgZ: a quantized gradient's partition is padded");
    // Each destination's block: its N partitions, G / D groups.
    const QuantizedLayout layout =
        quantized_layout(block, q.node_groups / ranks_per_node_, kGradientBits);
    if (Bytes(layout.bytes() * local) != q.node_hop)
      throw std::logic_error("qgZ node hop: message differs from the schedule's");
    PlacedBytes send(ctx_.ledger, Device::Gpu, Component::ReduceBucket, q.node_hop);
    PlacedBytes receive(ctx_.ledger, Device::Gpu, Component::ReduceBucket, q.node_hop);
    ScratchFloats values(ctx_.ledger, Device::Gpu, block);
    const Numbers grad = grads_[std::size_t(t)].view();
    for (std::size_t l = 0; l < local; ++l) {
      for (std::size_t k = 0; k < nodes; ++k)
        grad.sub((k * local + l) * partition, partition)
            .read(values.span().subspan(k * partition, partition));
      quantize_into(values.span(), layout,
                    bytes_of(send).subspan(l * layout.bytes(), layout.bytes()));
    }
    node_->all_to_all_bytes(bytes_of(send), bytes_of(receive));
    grads_[std::size_t(t)].reset();
    std::fill(values.span().begin(), values.span().end(), 0.0f);
    for (std::size_t j = 0; j < local; ++j)
      dequantize_from(bytes_of(receive).subspan(j * layout.bytes(), layout.bytes()), layout,
                      values.span(), /*add=*/true);
    const OwnedRun owned{ctx_.offsets.partition[std::size_t(t)], Elements(partition)};
    if (nodes == 1) {
      keep_reduced(values.view(), {owned}, average_over(ctx_.spaces[0]));
      continue;
    }
    // Node k's partition (k D + index) in block k, G / (D N) groups each.
    const QuantizedLayout next =
        quantized_layout(partition, q.cross_node_groups / nodes_, kGradientBits);
    PlacedBytes& message = cross_node_messages_.emplace_back(
        ctx_.ledger, Device::Gpu, Component::ReduceBucket, q.cross_node_hop);
    if (Bytes(next.bytes() * nodes) != q.cross_node_hop)
      throw std::logic_error("qgZ cross-node hop: message differs from the schedule's");
    for (std::size_t k = 0; k < nodes; ++k)
      quantize_into(values.span().subspan(k * partition, partition), next,
                    bytes_of(message).subspan(k * next.bytes(), next.bytes()));
  }
}

void GradientReducer::cross_node_hop(std::span<const std::int32_t> tensors) {
  if (cross_node_messages_.size() != tensors.size())
    throw std::logic_error("schedule error: a cross-node hop without its node hop");
  const auto ranks = std::size_t(ctx_.dp), nodes = std::size_t(nodes_);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::int32_t t = tensors[i];
    const QgzTensor q = quantized_tensor(t);
    const std::size_t partition = std::size_t(ctx_.layout.tensor_numel[std::size_t(t)]) / ranks;
    const QuantizedLayout layout =
        quantized_layout(partition, q.cross_node_groups / nodes_, kGradientBits);
    PlacedBytes receive(ctx_.ledger, Device::Gpu, Component::ReduceBucket, q.cross_node_hop);
    cross_node_->all_to_all_bytes(bytes_of(cross_node_messages_[i]), bytes_of(receive));
    cross_node_messages_[i].reset();
    ScratchFloats sum(ctx_.ledger, Device::Gpu, partition);
    std::fill(sum.span().begin(), sum.span().end(), 0.0f);
    for (std::size_t k = 0; k < nodes; ++k)
      dequantize_from(bytes_of(receive).subspan(k * layout.bytes(), layout.bytes()), layout,
                      sum.span(), /*add=*/true);
    keep_reduced(sum.view(), {{ctx_.offsets.partition[std::size_t(t)], Elements(partition)}},
                 average_over(ctx_.spaces[0]));
  }
  cross_node_messages_.clear();
}

}  // namespace zerolens::exec
