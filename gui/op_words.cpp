#include "gui/op_words.hpp"

#include <cstdio>

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

std::string transfer_words(const Plan& plan, const Op& op) {
  if (op.link != Link::Network) return "";
  const Cluster& cluster = plan.request.cluster;
  const LinkTraffic traffic = collective_traffic(
      op.kind, op.bytes, group_shape(op.group_size, plan.schedule.context.gpus_per_node));
  std::string words = "each of the " + std::to_string(op.group_size) + " ranks sends " +
                      human_bytes(traffic.intra_node) + " over " + cluster.node.intra_node.name;
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
  const std::string moved = transfer_words(planned.plan, op);
  if (!moved.empty()) caption += "; " + moved;
  return caption;
}

}  // namespace zerolens::gui
