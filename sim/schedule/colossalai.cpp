#include "sim/schedule/colossalai.hpp"

namespace zerolens {

std::string module_of(const std::string& tensor_name) {
  const auto dot = tensor_name.rfind('.');
  return dot == std::string::npos ? tensor_name : tensor_name.substr(0, dot);
}

std::vector<ColossalGather> colossalai_gathers(const Model& model, const ParamLayout& layout,
                                               std::size_t layer, ShardStrategy strategy,
                                               int world) {
  std::vector<ColossalGather> gathers;
  const auto first = layout.layer_first_tensor[layer];
  const auto& params = model.layers[layer].params;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto tensor = first + std::int32_t(i);
    const Elements gathered = layout.tensor_partition[std::size_t(tensor)] * world;
    const std::string module = module_of(params[i].name);
    const bool joins = strategy == ShardStrategy::BucketTensor && !gathers.empty() &&
                       gathers.back().module == module;
    if (!joins) gathers.push_back({.first_tensor = tensor, .module = module});
    ColossalGather& gather = gathers.back();
    ++gather.tensor_count;
    gather.gathered += gathered;
    // The bucket strategy's N buffers of the flattened shards: as many elements as it gathers.
    if (strategy == ShardStrategy::BucketTensor) gather.transient += gathered;
  }
  return gathers;
}

Elements colossalai_bucket_row_elements(std::int64_t bucket_size_mb, Bytes element_bytes,
                                        int world) {
  if (bucket_size_mb <= 0) return 0;
  return bucket_size_mb * (std::int64_t(1) << 20) / element_bytes / world;
}

// torch.chunk(numel, world) makes ceil(numel / chunk) chunks of `chunk` elements, the last one
// shorter: chunk_and_pad pads that one into a new tensor (F.pad) and adds zeros_like chunks for the
// missing ones.
ColossalChunks colossalai_chunks(Elements numel, int world, Elements bucket_row) {
  ColossalChunks c;
  c.chunk = ceil_div(numel, Elements(world));
  const Elements made = c.chunk > 0 ? ceil_div(numel, c.chunk) : 0;
  const bool short_last = made > 0 && numel % c.chunk != 0;
  c.padding_made = (short_last ? c.chunk : 0) + (Elements(world) - made) * c.chunk;
  c.direct = c.chunk > bucket_row;
  return c;
}

}  // namespace zerolens
