#pragma once
// ZeRO++ (Wang et al. 2023, "ZeRO++: Extremely Efficient Collective Communication for Giant Model
// Training"): what its quantized collectives send and hold, as DeepSpeed 0.19.8 runs them.
//   qwZ  partition_parameters.py: a stage-3 fetch all-gathers the concatenated partitions as int8
//        (CUDAQuantizer.quantize, symmetric, 8 bits) and their fp32 scales in a second all-gather;
//        the waiting handle dequantizes the gathered int8 into a 16-bit flat tensor, from which
//        each parameter is copied out.
//   qgZ  coalesced_collectives.py all_to_all_quant_reduce: each gradient of two or more dimensions
//        is quantized to int4 in max(rows, cols, world) groups, exchanged among the node's ranks
//        (all-to-all), reduced there, re-quantized in groups / ranks-per-node groups, exchanged
//        with the ranks of the same local index on the other nodes, dequantized and averaged. A
//        1-D gradient, or one whose elements 2 x world does not divide, is reduce-scattered.
#include <cstdint>
#include <vector>

#include "sim/core/units.hpp"

namespace zerolens {

// How many fp32 scales CUDAQuantizer.quantize makes for `elements` values: the least group count
// at or above elements / 8000 that splits them into groups of a multiple of 8 elements, doubled
// while the groups stay above 8000 elements and still split evenly. Elements not a multiple of 8
// (DeepSpeed asserts on them): elements / 8000 rounded up.
std::int64_t qwz_scale_groups(Elements elements);

// What one rank puts into a qwZ fetch of `elements` values: int8 values and fp32 scales.
Bytes qwz_send_bytes(Elements elements);

// One gradient's qgZ reduction over `world` ranks, `ranks_per_node` of them on each node.
struct QgzTensor {
  bool quantized = false;    // false: reduce-scattered (1-D, or 2 x world does not divide it)
  Bytes node_hop = 0;        // message of the all-to-all among the node's ranks (int4 + scales)
  Bytes cross_node_hop = 0;  // message of the all-to-all across nodes (int4 + scales)
  Bytes transient = 0;       // buffers alive while it is reduced (freed before the next tensor)
  std::int64_t node_groups = 0;        // int4 groups (fp32 scales) of the whole tensor, node hop
  std::int64_t cross_node_groups = 0;  // of the rank's reduced 1 / ranks-per-node, cross hop
};
QgzTensor qgz_tensor(const std::vector<std::int64_t>& shape, int world, int ranks_per_node);

}  // namespace zerolens
