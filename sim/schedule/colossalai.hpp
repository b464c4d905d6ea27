#pragma once
// ColossalAI's ShardedModelV2 (v0.1.5; docs/seeds.md): what its shard strategies gather and what
// its ReduceScatterBucketer reduces, worked out per module and per gradient for the schedule
// builder.
//   Sharding  shard_utils/commons.py get_shard: each tensor flattened and split by torch.chunk into
//             ceil(numel / N) elements per rank, the last ranks' shards zero-padded.
//   Gathers   zero/utils/zero_hook.py: a module's own parameters are gathered in its pre-forward
//             and pre-backward hooks and sharded again in the post hooks.
//             TensorShardStrategy._gather_tensor: one all-gather per tensor into an N x shard
//             buffer, which the gathered tensor views (nothing more is held).
//             BucketTensorShardStrategy.gather: one all-gather per module of N buffers of the
//             module's flattened shards, then torch.cat per tensor: the gathered tensors are
//             new, so the N buffers (as many bytes again) live until the gather returns.
//   Reduction sharded_model/reduce_scatter.py ReduceScatterBucketer: each gradient is chunked and
//             padded to N chunks; a chunk of at most bucket_size_mb MiB / element size / N
//             elements is appended to a bucket of N rows of that many elements, reduce-scattered
//             when the next does not fit and at the end of backward; a larger chunk is
//             reduce-scattered at once from a torch.cat of its chunks.
#include <cstdint>
#include <string>
#include <vector>

#include "sim/config/config.hpp"
#include "sim/core/units.hpp"
#include "sim/model/model.hpp"
#include "sim/schedule/param_layout.hpp"

namespace zerolens {

// The module a parameter belongs to: its name up to the last '.' ("h.0.attn.c_attn" for
// "h.0.attn.c_attn.weight"; a name without a dot is its own module).
std::string module_of(const std::string& tensor_name);

// One all-gather of ZeroHook: the global tensor ids [first_tensor, first_tensor + tensor_count).
struct ColossalGather {
  std::int32_t first_tensor = 0;
  std::int32_t tensor_count = 0;
  std::string module;
  Elements gathered = 0;   // N x the padded shards: the all-gather's output, held until release
  Elements transient = 0;  // held besides while the gather runs (BucketTensor: its N buffers)
};

// The all-gathers of `layer`'s own parameters, in parameter order: one per tensor (Tensor) or one
// per module (BucketTensor) over `world` ranks.
std::vector<ColossalGather> colossalai_gathers(const Model& model, const ParamLayout& layout,
                                               std::size_t layer, ShardStrategy strategy,
                                               int world);

// ReduceScatterBucketer._get_shard_size: elements of one bucket row (per rank), 0 when bucketing
// is off (bucket_size_mb <= 0).
Elements colossalai_bucket_row_elements(std::int64_t bucket_size_mb, Bytes element_bytes,
                                        int world);

// What one gradient's hook puts into the reduction (chunk_and_pad over `world` ranks).
struct ColossalChunks {
  Elements chunk = 0;         // ceil(numel / world): this rank's reduced shard
  Elements padding_made = 0;  // elements F.pad and zeros_like make for short or missing chunks
  bool direct = false;        // larger than a bucket row: reduce-scattered at once
};
ColossalChunks colossalai_chunks(Elements numel, int world, Elements bucket_row);

}  // namespace zerolens
