#include "gui/op_words.hpp"

#include <cstdio>

#include "gui/rank_scene.hpp"
#include "sim/schedule/comm.hpp"

namespace zerolens::gui {

std::string human_bytes(Bytes bytes) {
  const double value = double(bytes);
  const double magnitude = value < 0 ? -value : value;
  char text[64];
  if (magnitude >= 1e9)
    std::snprintf(text, sizeof text, "%.2f GB", value / 1e9);
  else if (magnitude >= 1e6)
    std::snprintf(text, sizeof text, "%.1f MB", value / 1e6);
  else if (magnitude >= 1e3)
    std::snprintf(text, sizeof text, "%.1f kB", value / 1e3);
  else
    std::snprintf(text, sizeof text, "%lld B", static_cast<long long>(bytes));
  return text;
}

std::string group_words(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return "rank " + std::to_string(ranks.front());
  const int stride = ranks[1] - ranks[0];
  if (stride == 1)
    return "ranks " + std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
  std::string words = "ranks ";
  if (ranks.size() <= 8) {
    for (std::size_t i = 0; i < ranks.size(); ++i)
      words += (i ? ", " : "") + std::to_string(ranks[i]);
    return words;
  }
  return words + std::to_string(ranks[0]) + ", " + std::to_string(ranks[1]) + ", ..., " +
         std::to_string(ranks.back()) + " (" + std::to_string(stride) + " apart)";
}

std::string transfer_words(const Plan& plan, const Op& op, int rank) {
  if (op.link != Link::Network) return "";
  const Cluster& cluster = plan.request.cluster;
  const ScheduleContext& context = plan.schedule.context;
  const LinkTraffic traffic = collective_traffic(op.kind, op.bytes, op_group_shape(op, context));
  std::string ranks = std::to_string(op.group_size) + " ranks";
  if (context.tensor_parallel > 1) {
    // Name the group: with TP, ranks belong to a tensor-parallel and a data-parallel group.
    const bool tensor = op.group == ProcessGroup::Tensor;
    ranks += std::string(" of its ") + (tensor ? "tensor-parallel" : "data-parallel") + " group (" +
             group_words(group_ranks(op.group, rank, context.tensor_parallel, context.dp_size)) +
             ")";
  }
  std::string words = "each of the " + ranks + " sends " + human_bytes(traffic.intra_node) +
                      " over " + cluster.node.intra_node.name;
  if (traffic.inter_node > 0)
    words += " and " + human_bytes(traffic.inter_node) + " over " + cluster.inter_node.name;
  return words;
}

std::string op_caption(const Planned& planned, std::int64_t step, int rank) {
  const Schedule& schedule = planned.plan.schedule;
  if (step < 0) {
    return "Before the step: each GPU holds its resident memory; press \u2192 or Play to run the "
           "step (" +
           std::to_string(schedule.ops.size()) + " ops)";
  }
  const Op& op = schedule.ops.at(std::size_t(step));
  std::string caption = "op " + std::to_string(step + 1) + " of " +
                        std::to_string(schedule.ops.size()) + " (" + to_string(op.phase) +
                        "): " + schedule.describe(std::size_t(step), planned.plan.rank_model, rank);
  const std::string moved = transfer_words(planned.plan, op, rank);
  if (!moved.empty()) caption += "; " + moved;
  return caption;
}

}  // namespace zerolens::gui
