#include "sim/schedule/comm.hpp"

#include <algorithm>

namespace zerolens {
namespace {

__extension__ typedef __int128 WideInt;

// numerator * value / denominator without 64-bit overflow (messages reach 1e13 bytes, groups 1e5).
Bytes scale(Bytes value, std::int64_t numerator, std::int64_t denominator) {
  if (denominator <= 0) return 0;
  return Bytes(static_cast<WideInt>(value) * numerator / denominator);
}

}  // namespace

GroupShape group_shape(int group_size, int gpus_per_node) {
  GroupShape shape;
  shape.ranks_per_node = std::max(1, std::min(group_size, gpus_per_node));
  shape.nodes = int(ceil_div(group_size, shape.ranks_per_node));
  return shape;
}

GroupShape op_group_shape(const Op& op, const ScheduleContext& context) {
  switch (op.group) {
    case ProcessGroup::Tensor:
      return group_shape(op.group_size, context.gpus_per_node);
    case ProcessGroup::Pipeline: {
      // Two ranks: this stage's and its peer's, on one node or two.
      if (op.peer_stage >= 0)
        return context.stage_on_same_node(op.peer_stage) ? GroupShape{2, 1} : GroupShape{1, 2};
      // Every stage (of this rank's TP and DP coordinates): as many per node as share one.
      int on_this_node = 0;
      for (int stage = 0; stage < context.pipeline_parallel; ++stage)
        on_this_node += context.stage_on_same_node(stage) ? 1 : 0;
      return GroupShape{on_this_node, int(ceil_div(context.pipeline_parallel, on_this_node))};
    }
    case ProcessGroup::Replicate: {
      // Shard groups are consecutive data-parallel ranks: the copies of a partition are shard
      // ranks apart, so a node holds its DP ranks / shard of them.
      const int per_node =
          std::max(1, context.data_parallel_ranks_per_node() / context.shard_size());
      return group_shape(op.group_size, per_node);
    }
    case ProcessGroup::CrossNode:  // one rank on each node (qgZ's second hop)
      return GroupShape{1, op.group_size};
    case ProcessGroup::ExpertData: {
      // The ranks holding the same experts are expert_parallel apart (EP groups are consecutive
      // data-parallel ranks): a node holds its DP ranks / expert_parallel of them.
      const int per_node = std::max(
          1, context.data_parallel_ranks_per_node() / std::max(1, context.expert_parallel));
      return group_shape(op.group_size, per_node);
    }
    case ProcessGroup::Expert:  // consecutive data-parallel ranks
      break;
    case ProcessGroup::Data:
    case ProcessGroup::Secondary:  // consecutive data-parallel ranks, as DeepSpeed groups them
    case ProcessGroup::NodeLocal:
      break;
  }
  return group_shape(op.group_size, context.data_parallel_ranks_per_node());
}

LinkTraffic collective_traffic(OpKind kind, Bytes message_bytes, GroupShape shape) {
  // Point to point: a send puts its message on the one link to its peer, a receive sends nothing.
  if (kind == OpKind::Send)
    return shape.nodes > 1 ? LinkTraffic{0, message_bytes} : LinkTraffic{message_bytes, 0};
  if (kind == OpKind::Recv) return {};
  if (kind == OpKind::AllToAll) {
    // Each rank sends 1/N of its message to each of the N-1 others: g-1 of them on its node.
    const std::int64_t ranks = std::int64_t(shape.ranks_per_node) * shape.nodes;
    return {scale(message_bytes, shape.ranks_per_node - 1, ranks),
            scale(message_bytes, ranks - shape.ranks_per_node, ranks)};
  }
  const std::int64_t g = shape.ranks_per_node;
  const std::int64_t m = shape.nodes;
  const std::int64_t phases = (kind == OpKind::AllReduce || kind == OpKind::OverflowCheck ||
                               kind == OpKind::GradNorm)
                                  ? 2
                                  : 1;
  LinkTraffic traffic;
  traffic.intra_node = scale(message_bytes, phases * (g - 1), g);
  traffic.inter_node = scale(message_bytes, phases * (m - 1), m * g);
  return traffic;
}

namespace {

std::array<CollectiveTotals, kOpKindCount>& totals_of(CommReport& report, ProcessGroup group) {
  switch (group) {
    case ProcessGroup::Tensor:
      return report.tensor_parallel;
    case ProcessGroup::Pipeline:
      return report.pipeline;
    case ProcessGroup::Replicate:
      return report.replicate;
    case ProcessGroup::Secondary:
      return report.secondary;
    case ProcessGroup::NodeLocal:
      return report.node_local;
    case ProcessGroup::CrossNode:
      return report.cross_node;
    case ProcessGroup::Expert:
      return report.expert_parallel;
    case ProcessGroup::ExpertData:
      return report.expert_data;
    case ProcessGroup::Data:
      break;
  }
  return report.collectives;
}

}  // namespace

CommReport summarize_comm(const Schedule& schedule) {
  CommReport report;
  for (const auto& op : schedule.ops) {
    switch (op.link) {
      case Link::PcieH2D: report.links.pcie_h2d += op.bytes; break;
      case Link::PcieD2H: report.links.pcie_d2h += op.bytes; break;
      case Link::NvmeRead: report.links.nvme_read += op.bytes; break;
      case Link::NvmeWrite: report.links.nvme_write += op.bytes; break;
      case Link::Network: {
        const LinkTraffic traffic =
            collective_traffic(op.kind, op.bytes, op_group_shape(op, schedule.context));
        auto& totals = totals_of(report, op.group)[std::size_t(op.kind)];
        totals.calls += op.calls;
        totals.bytes += op.bytes;
        totals.traffic_bytes += traffic.intra_node + traffic.inter_node;
        report.links.intra_node += traffic.intra_node;
        report.links.inter_node += traffic.inter_node;
        break;
      }
      case Link::None: break;
    }
  }
  return report;
}

}  // namespace zerolens
