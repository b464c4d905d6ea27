#pragma once
// The engine's gradient reducer (internal to exec/): per-tensor gradients filled by backward,
// bucket reductions as the schedule orders them, and where the reduced gradients this rank owns are
// kept until the update (the device partition, stage 1's per-bucket chunks, or the fp32 host
// partition with optimizer offload).
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "exec/engine/context.hpp"
#include "sim/schedule/zeropp.hpp"

namespace zerolens::exec {

// One layer's gradients as fp32 views for the model: the storage itself (fp32) or a scratch copy
// of 16-bit storage, which commit() casts back.
struct LayerGrads {
  std::optional<ScratchFloats> scratch;
  std::vector<std::span<float>> views;
  std::vector<Numbers> storage;  // 16-bit: where commit() writes the views back
  void commit();
};

class GradientReducer {
 public:
  explicit GradientReducer(EngineContext& context);

  // The resident buffers (after the optimizer's states, in the plan's order): the owned partition
  // (fp32 on the host with a host optimizer; on the device in stage 3) and the persistent reduce
  // buffer where the schedule has one from the start.
  void allocate_resident();

  LayerGrads layer_grads(std::size_t owner);
  // The hook of GradientFault: +inf into one element of a complete gradient.
  void inject_inf(std::int32_t tensor, Elements element);
  // The persistent reduce buffer (DeepSpeed's ipg buffer) follows the schedule's effects of `op`:
  // its allocations before the op's work, its releases after.
  void follow_reduce_buffer(const Op& op, bool allocations);
  // Whether `op`'s first effect allocates the reduce buffer (before the op's own work).
  bool reduce_buffer_comes_first(const Op& op) const;
  void reduce_bucket(const Op& op);  // AllReduce or ReduceScatter
  // SP: the gradients of the tensors each TP rank computed from its part of the sequence (norms,
  // row-parallel biases), summed over the TP group once per step, after the data-parallel
  // reduction (Megatron's finalize_model_grads -> _allreduce_layernorm_grads).
  void all_reduce_sequence_parallel(const Op& op);
  // PP: the first stage's word embeddings and the last stage's copy of them (the tied LM head)
  // sum their whole gradients over the two, before the data-parallel reduction (DeepSpeed's
  // ReduceTiedGrads).
  void all_reduce_tied_embedding(const Op& op);
  // Hybrid sharding (stage 3, the partition on the device): the bucket's tensors' partitions,
  // accumulated over the step's micro-steps from the shard group's sums, summed with their copies
  // in the other shard groups (DeepSpeed's MiCS allreduce_mics_shard_grads at the boundary).
  void all_reduce_replicas(const Op& op);
  void copy_to_host(const Op& op);   // CopyD2H of a reduced bucket (optimizer offload)
  // ZeRO++ qgZ (exec/engine/quantized_reduction.cpp): the bucket's quantizable gradients (sim's
  // qgz_tensor) in two int4 all-to-all hops, among the node's ranks (an AllToAll over NodeLocal)
  // and then among the ranks of the same local index on every node (CrossNode); the bucket's
  // other gradients go by reduce_bucket's reduce-scatter.
  void quantized_hop(const Op& op);
  // qgZ's groups (nullptr without qgZ; no cross-node group on one node), for the run's counts.
  const Communicator* node_group() const { return node_.get(); }
  const Communicator* cross_node_group() const { return cross_node_.get(); }

  // The reduced gradients of an owned segment, wherever this stage and device keep them.
  Numbers owned_grads(const OwnedSegment& segment);
  std::span<float> host_partition() { return host_grads_.span(); }
  // After the update (or a skipped one): gradients are dropped (set_to_none); stage 3's device
  // partition and the host partition are reused.
  void free_step_gradients();

 private:
  const ParamSpace& bucket_space(const Op& op, std::span<const std::int32_t> tensors) const;
  float average_over(const ParamSpace& space) const;
  void reduce_bucket_stage3(const ParamSpace& space, std::span<const std::int32_t> tensors);
  void split_quantized_groups();
  std::vector<std::int32_t> bucket_tensors(const Op& op, bool quantized) const;
  QgzTensor quantized_tensor(std::int32_t tensor) const;
  void node_hop(std::span<const std::int32_t> tensors);
  void cross_node_hop(std::span<const std::int32_t> tensors);
  void reduce_bucket_flat(const Op& op, std::vector<std::int32_t> tensors);
  Numbers reduce_flat(const Op& op, const ParamSpace& space, Numbers bucket, Elements first,
                      Elements last);
  void keep_reduced(Numbers reduced, std::vector<OwnedRun> runs, float average);
  Numbers new_grad_chunk(Elements owned_begin, Elements length);
  Numbers staging(std::size_t elements, NumberBuffer& transient);
  void ensure_grad_partition();

  EngineContext& ctx_;
  std::vector<NumberBuffer> grads_;  // per tensor: whole gradient before reduction
  NumberBuffer
      grad_part_;  // stages 2-3 without optimizer offload: the reduced gradients this rank owns
  TrackedBuffer<float> host_grads_;  // optimizer offload: the fp32 gradient partition on the host
  struct GradChunk {
    Elements begin = 0;  // position in the owned partition
    NumberBuffer values;
  };
  std::vector<GradChunk> grad_chunks_;  // stage 1: the reduced part of each bucket
  NumberBuffer scatter_output_;         // a reduce-scatter's share, while it is added in
  NumberBuffer reduce_buffer_;          // the schedule's persistent ReduceBucket (ipg buffer)
  // Optimizer offload: a bucket's owned gradients until its CopyD2H (one part per reduction of
  // the bucket: qgZ's hops and its reduce-scatter give several), and where they go in the host
  // partition.
  struct Reduced {
    NumberBuffer values;
    std::vector<OwnedRun> runs;
    float average = 1;  // the mean over the ranks that summed them
  };
  std::vector<Reduced> reduced_;
  // qgZ: the node's ranks and the ranks of this local index on every node, split off the
  // data-parallel group; each quantized tensor's requantized sum between the two hops.
  std::unique_ptr<Communicator> node_, cross_node_;
  int ranks_per_node_ = 1, nodes_ = 1;
  std::vector<PlacedBytes> cross_node_messages_;
};

}  // namespace zerolens::exec
