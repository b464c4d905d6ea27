#include "sim/schedule/zeropp.hpp"

#include <algorithm>

namespace zerolens {
namespace {

constexpr Elements kTargetGroupElements = 8000;  // CUDAQuantizer.target_group_size

// The least divisor of `value` at or above `floor` (value itself at worst). Upward from the floor
// first: sizes built of small primes have one close by; a full search is for the rest.
std::int64_t least_divisor_from(std::int64_t value, std::int64_t floor) {
  const std::int64_t stop = std::min(value, floor + 100'000);
  for (std::int64_t d = floor; d <= stop; ++d) {
    if (value % d == 0) return d;
  }
  std::int64_t best = value;
  for (std::int64_t i = 1; i * i <= value; ++i) {
    if (value % i != 0) continue;
    if (i >= floor) best = std::min(best, i);
    if (value / i >= floor) best = std::min(best, value / i);
  }
  return best;
}

}  // namespace

std::int64_t qwz_scale_groups(Elements elements) {
  if (elements <= 0) return 0;
  const std::int64_t first = (elements + kTargetGroupElements - 1) / kTargetGroupElements;
  if (elements % 8 != 0) return first;
  std::int64_t groups = least_divisor_from(elements / 8, first);
  while (elements % (16 * groups) == 0 && elements > kTargetGroupElements * groups) groups *= 2;
  return groups;
}

Bytes qwz_send_bytes(Elements elements) {
  return elements + 4 * qwz_scale_groups(elements);
}

QgzTensor qgz_tensor(const std::vector<std::int64_t>& shape, int world, int ranks_per_node) {
  QgzTensor result;
  Elements elements = 1;
  for (const std::int64_t dim : shape) elements *= dim;
  if (shape.size() < 2 || world < 1 || ranks_per_node < 1 || elements % (2 * world) != 0) {
    return result;
  }
  const std::int64_t node_groups = std::max({shape[0], shape[1], std::int64_t(world)});
  const std::int64_t cross_groups = node_groups / ranks_per_node;
  const Elements per_node_rank = elements / ranks_per_node;
  result.quantized = true;
  result.node_groups = node_groups;
  result.cross_node_groups = cross_groups;
  result.node_hop = elements / 2 + 4 * node_groups;
  result.cross_node_hop = per_node_rank / 2 + 4 * cross_groups;
  // The int4 input and what the node's ranks send back, the reduced int4 slice and what the other
  // nodes send back, then its 16-bit dequantization (its average over the nodes is the output).
  result.transient = 2 * result.node_hop + 2 * result.cross_node_hop + 2 * per_node_rank;
  return result;
}

}  // namespace zerolens
