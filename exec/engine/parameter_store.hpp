#pragma once
// The engine's parameter store (internal to exec/): where each tensor lives per stage (whole, or
// this rank's stage-3 partition on the device, the host or in NVMe files), stage-3 gathers and
// releases, the stage 1-2 all-gather of updated partitions, and the updated values written back.
#include <array>
#include <optional>
#include <span>
#include <vector>

#include "exec/engine/context.hpp"
#include "exec/engine/nvme_swapper.hpp"
#include "exec/io/checkpoint.hpp"
#include "exec/model/layer_model.hpp"

namespace zerolens::exec {

// What the model computes on: views of one layer's tensors in fp32, directly on fp32 storage or
// on a scratch copy of 16-bit storage. The views are in the memory space of the ledger's Gpu device
// (host memory on the CPU backend): the model computes where the engine's device buffers are.
struct LayerParams {
  std::optional<ScratchFloats> scratch;
  std::vector<std::span<const float>> views;
};

// hpZ: whether a stage-3 release keeps this rank's secondary partition of the layer first.
enum class SecondaryCopy { None, Keep };

class ParameterStore {
 public:
  ParameterStore(EngineContext& context, NvmeSwapper& nvme);

  // The model's initial values, rounded to the training dtype; `master` (has_master: the owned
  // partition in fp32) receives the rounded values of the owned segments.
  void initialize(LayerModel& net, Numbers master);
  void begin_step() { shard_offset_ = {0, 0}; }

  // The training-dtype parameters of an owned segment: in the whole tensor (stages 0-2) or in this
  // rank's partition (stage 3, on the host with parameter offload).
  Numbers device_params(const OwnedSegment& segment);
  LayerParams layer_params(std::size_t owner);  // throws if the layer is not gathered

  // Stage 3: over the partition group, or (`from_secondary`, hpZ) over the secondary group from
  // the secondary partitions the layer's release kept.
  void gather_layer(std::size_t owner, bool from_secondary = false);
  // ColossalAI: one all-gather of tensors [first, first + count) (a tensor, or a module's), and
  // its placements' moves of shards: the op's tensors (tensor_count 0: the layer's) that are not on
  // `to` go there (a copy in the other memory space; the bytes are counted on the PCIe link).
  void gather_tensors(std::int32_t first, std::int32_t count);
  void move_shards(const Op& op, Device to);
  void release_layer(std::size_t owner, SecondaryCopy secondary = SecondaryCopy::None);
  void drop_secondary();                    // hpZ: every secondary partition (after the update)
  void gather_persistent();                 // stage 3, after the update
  void gather_updated_shard(const Op& op);  // stages 1-2, after the update
  void stage_layer_partition(std::size_t owner);  // CopyH2D before a stage-3 gather (offload)
  // CopyH2D after a host update: the master rounded into the parameters (`written`: the update put
  // them there already, only counted).
  void write_back(Numbers master, bool written);
  // The updated master of `range`, where the parameters live (host, device or NVMe).
  void store_updated(const OptimizerRange& range);

  std::vector<float> full_parameters();  // widened to fp32; a collective in stage 3
  void restore(const FullState& state);  // the parameters from the checkpoint's master weights

  // Elements per rank staged at once by gather_updated_shard: at most (1 + dp) x this x the
  // parameter's bytes above the plan, which gathers in place as DeepSpeed does.
  static constexpr Elements kGatherSliceElements = Elements(1) << 20;

 private:
  void gather_layer_quantized(std::size_t owner);
  Numbers staged_partition(std::size_t tensor, std::size_t& staged);
  void gather_updated_slice(const ParamSpace& space, bool expert, Elements offset,
                            Elements elements);
  void write_flat(bool expert, Elements first, Numbers values);
  void read_flat(bool expert, Elements first, Numbers values);
  void set_partition(std::size_t tensor, std::span<const float> values);
  Numbers persistent_block(std::size_t tensor);

  EngineContext& ctx_;
  NvmeSwapper& nvme_;
  std::vector<NumberBuffer> full_;  // per tensor: whole (stage 0-2), persistent or gathered (stage
                                    // 3), padded to dp partitions in stage 3
  std::vector<NumberBuffer>
      part_;  // stage 3: this rank's partition of each tensor (on the host with parameter offload)
  std::vector<Device> part_device_;  // where each partition is (ColossalAI moves them)
  // hpZ: per tensor, this rank's 1/hpz of its gathered (padded) values, kept from a release until
  // the update (ZeRO++'s secondary partition)
  std::vector<NumberBuffer> secondary_;
  NumberBuffer h2d_staging_;  // parameter offload: a layer's partitions until its all-gather
  // Stages 1-2: position of the next all-gather shard in the partition of each space (the
  // non-expert tensors', the experts').
  std::array<Elements, 2> shard_offset_{};
};

}  // namespace zerolens::exec
