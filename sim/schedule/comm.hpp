#pragma once
// Communication: per-rank traffic of each collective over the links it crosses, and the step's
// totals summed from the schedule's ops (the only place traffic is counted).
//
// A collective of message size S bytes over N ranks (nccl-tests' bus-bandwidth factors): all-reduce
// sends 2(N-1)/N x S per rank, reduce-scatter, all-gather and broadcast (N-1)/N x S. When the group
// spans m nodes of g ranks, the hierarchical split is: intra-node g-ring phases carry
// (g-1)/g x S (x2 for all-reduce) and the inter-node phase carries (m-1)/m x S/g (x2 for
// all-reduce); the two sum to the flat figure. An all-to-all sends S/N to each other rank:
// (g-1)/N x S within the node, (N-g)/N x S across nodes.
#include <array>
#include <cstdint>

#include "sim/schedule/schedule.hpp"

namespace zerolens {

struct LinkTraffic {
  Bytes intra_node = 0;  // bytes sent per rank over NVLink/NVSwitch
  Bytes inter_node = 0;  // bytes sent per rank over the inter-node network
};

// Ranks per node taking part and the number of nodes a dp group of `group_size` spans.
struct GroupShape {
  int ranks_per_node = 1;
  int nodes = 1;
};
GroupShape group_shape(int group_size, int gpus_per_node);
// The shape of the group `op` runs over: a TP group fills a node first; a data-parallel group has
// context.data_parallel_ranks_per_node() ranks on each node it spans.
GroupShape op_group_shape(const Op& op, const ScheduleContext& context);

LinkTraffic collective_traffic(OpKind kind, Bytes message_bytes, GroupShape shape);

struct CollectiveTotals {
  std::int64_t calls = 0;
  Bytes bytes = 0;          // sum of message sizes
  Bytes traffic_bytes = 0;  // sent per rank (intra + inter)
  bool operator==(const CollectiveTotals&) const = default;
};

struct LinkTotals {
  Bytes intra_node = 0;
  Bytes inter_node = 0;
  Bytes pcie_h2d = 0;
  Bytes pcie_d2h = 0;
  Bytes nvme_read = 0;
  Bytes nvme_write = 0;
  bool operator==(const LinkTotals&) const = default;
};

struct CommReport {
  std::array<CollectiveTotals, kOpKindCount> collectives{};  // indexed by OpKind, data-parallel
  // The tensor-parallel group's collectives (indexed by OpKind; none without TP). Their traffic is
  // in `links` too.
  std::array<CollectiveTotals, kOpKindCount> tensor_parallel{};
  // Between pipeline stages: sends, receives and the tied embedding's all-reduce (none without
  // pipeline parallelism). A send's bytes are sent over the link to its peer; a receive sends none.
  std::array<CollectiveTotals, kOpKindCount> pipeline{};
  // Hybrid sharding: the all-reduces over the replicate group (none without it).
  std::array<CollectiveTotals, kOpKindCount> replicate{};
  // ZeRO++: hpZ's gathers within its secondary group, and qgZ's all-to-all hops within the node
  // and across nodes (none without them).
  std::array<CollectiveTotals, kOpKindCount> secondary{}, node_local{}, cross_node{};
  // Expert parallelism: the MoE layers' token exchanges over the EP group, and the expert
  // parameters' reductions and gathers over the expert-data-parallel group (none without it).
  std::array<CollectiveTotals, kOpKindCount> expert_parallel{}, expert_data{};
  LinkTotals links;                                           // per rank, one step
  const CollectiveTotals& of(OpKind kind) const { return collectives[std::size_t(kind)]; }
};

CommReport summarize_comm(const Schedule& schedule);

}  // namespace zerolens
