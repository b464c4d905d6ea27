// Host offload copies, as the schedule orders them, each counted on its link (on the CPU backend
// both sides are host memory; the ledger keeps them apart as devices Gpu and Cpu).
#include <stdexcept>

#include "exec/zero_state.hpp"

namespace zerolens::exec {

// CopyH2D: before a stage-3 gather (parameter offload) the layer's partitions go to the device;
// after a host update the new parameters do (not after a skipped step: nothing changed).
void ZeroEngine::State::copy_to_device(const Op& op) {
  if (op.layer >= 0) return stage_layer_partition(std::size_t(op.layer));
  if (!overflow_) write_back_params();
}

// The staging buffer the schedule allocates (OffloadStaging) and its gather frees.
void ZeroEngine::State::stage_layer_partition(std::size_t owner) {
  if (h2d_staging_.size() > 0) throw std::logic_error("schedule error: two parameter copies before one gather");
  const auto [first, last] = tensors_of_layer(owner);
  std::size_t elements = 0;
  for (auto t = first; t < last; ++t) {
    if (!layout.tensor_persistent[std::size_t(t)]) elements += std::size_t(layout.tensor_partition[std::size_t(t)]);
  }
  h2d_staging_ = {ledger, Device::Gpu, Component::OffloadStaging, param_format, elements};
  if (param_store_) {  // the layer's NvmeRead put its partitions in the swap buffer, in this order
    finish_param_writes();
    h2d_staging_.view().copy_from(param_swap_.view(0, elements));
    copied.pcie_h2d += h2d_staging_.bytes();
    return;
  }
  std::size_t position = 0;
  for (auto t = first; t < last; ++t) {
    if (layout.tensor_persistent[std::size_t(t)]) continue;
    const Numbers partition = part_[std::size_t(t)].view();
    h2d_staging_.view(position, partition.size()).copy_from(partition);
    position += partition.size();
  }
  copied.pcie_h2d += h2d_staging_.bytes();
}

// The master rounded to the training dtype, into the device parameters (the bytes crossing are
// the training dtype's, as DeepSpeed's host Adam writes them): stage 3 copies whole partitions,
// padding included; stages 1-2 the owned segments (the last rank's padding is not stored). With
// the optimizer on NVMe each sub-group's update wrote its part already (its master is not kept):
// this op completes the copy and counts it.
void ZeroEngine::State::write_back_params() {
  if (!has_master) throw std::logic_error("schedule error: parameters copied back from a host optimizer without a master");
  const bool written = optimizer_device == Device::Nvme;
  if (stage.partitions_parameters()) {
    for (std::size_t t = 0; t < part_.size(); ++t) {
      if (!written) part_[t].view().copy_from(master_.view(std::size_t(partition_offset_[t]), part_[t].size()));
      copied.pcie_h2d += part_[t].bytes();
    }
    return;
  }
  for (const OwnedSegment& segment : segments_) {
    const Numbers params = device_params(segment);
    if (!written) params.copy_from(master_.view(std::size_t(segment.owned_offset), std::size_t(segment.length)));
    copied.pcie_h2d += params.bytes();
  }
}

// CopyD2H (optimizer offload): a reduced bucket's owned gradients, averaged over ranks, are added
// to the fp32 host partition (accumulating over micro-steps).
void ZeroEngine::State::copy_to_host(const Op& op) {
  if (op.bucket < 0) throw std::logic_error("the CPU executor copies only gradients to the host");
  const float average = 1.0f / float(dp);
  std::size_t read = 0;
  for (const OwnedRun& run : reduced_runs_) {
    const Numbers host(host_grads_.span().subspan(std::size_t(run.owned_offset), std::size_t(run.length)));
    host.add_scaled(reduced_.view(read, std::size_t(run.length)), average);
    read += std::size_t(run.length);
  }
  copied.pcie_d2h += reduced_.bytes();
  reduced_.reset();
  reduced_runs_.clear();
}

}  // namespace zerolens::exec
