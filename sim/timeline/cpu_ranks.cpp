#include "sim/timeline/cpu_ranks.hpp"

#include <algorithm>
#include <stdexcept>

#include "sim/core/error.hpp"
#include "sim/schedule/comm.hpp"

namespace zerolens {
namespace {

bool zero_cost(const LayerCost& cost) {
  return cost.per_matmul_flop == 0 && cost.per_attention_flop == 0 && cost.per_element == 0;
}

// A layer kind calibrate did not time (Generic: the executor trains GPT-2 only) costs what a
// transformer block does.
const LayerCost& cost_of(const ClusterCalibration& c, LayerKind kind, bool backward) {
  const auto& costs = backward ? c.backward : c.forward;
  const LayerCost& own = costs[std::size_t(kind)];
  return zero_cost(own) ? costs[std::size_t(LayerKind::TransformerBlock)] : own;
}

int ranks_on_node(const ScheduleContext& context) {
  return context.ranks_per_node();
}

// MPI's part of a collective over `group` ranks of one node: the calibrated latency per call (of
// the op's calls) and
// bus bandwidth of the largest measured group not above it; a 16-bit reduction at the 16-bit
// reductions' figures (a user-defined MPI op; fp32's figures where those were not measured).
double mpi_seconds(const Op& op, const ClusterCalibration& c) {
  if (op.group_size <= 1) return 0;
  const GroupCollectives* measured = c.collectives_of(op.group_size);
  if (!measured) {
    throw InputError("cluster.calibration.collectives",
                     "no collective measured for " + std::to_string(op.group_size) +
                         " ranks (calibrate under mpirun -np " + std::to_string(op.group_size) +
                         " or more)");
  }
  const bool reduces = op.kind == OpKind::AllReduce || op.kind == OpKind::ReduceScatter;
  const bool sixteen_bit =
      reduces && op.wire_element_bytes == 2 && measured->sixteen_bit_reduce_bandwidth > 0;
  const double latency = sixteen_bit ? measured->sixteen_bit_reduce_latency : measured->latency;
  const double bandwidth =
      sixteen_bit ? measured->sixteen_bit_reduce_bandwidth : measured->bandwidth;
  const LinkTraffic traffic = collective_traffic(op.kind, op.bytes, GroupShape{op.group_size, 1});
  return op.calls * latency + double(traffic.intra_node + traffic.inter_node) / bandwidth;
}

// The engine's own work per message byte: fp32 messages' where measured, else 16-bit ones'.
double local_collective_per_byte(const Op& op, const EngineCosts& e) {
  const bool fp32 = op.wire_element_bytes == 4;
  const auto pick = [&](double fp32_cost, double sixteen_bit_cost) {
    return fp32 && fp32_cost > 0 ? fp32_cost : sixteen_bit_cost;
  };
  switch (op.kind) {
    case OpKind::AllReduce:
      return pick(e.all_reduce_fp32_per_byte, e.all_reduce_per_byte);
    case OpKind::ReduceScatter:
      return pick(e.reduce_scatter_fp32_per_byte, e.reduce_scatter_per_byte);
    default:
      return pick(e.all_gather_fp32_per_byte, e.all_gather_per_byte);  // all-gather, broadcast
  }
}

// Its requests, each at its cost with the node's ranks swapping at once (a sub-group's own, or a
// tensor partition's of a parameter swap), and its bytes at the node's rate, which those ranks
// share; a parameter swap's bytes also at their cost beyond that rate (small requests).
double nvme_seconds(const Op& op, const ScheduleContext& context, const Cluster& cluster) {
  const bool read = op.kind == OpKind::NvmeRead;
  const double node_bandwidth =
      read ? cluster.node.nvme_read_bandwidth : cluster.node.nvme_write_bandwidth;
  if (!(node_bandwidth > 0)) {
    throw InputError(
        read ? "cluster.node.nvme_read_bandwidth" : "cluster.node.nvme_write_bandwidth",
        "must be positive to simulate NVMe offload");
  }
  const int ranks = ranks_on_node(context);
  const NvmeRequestCosts* costs = cluster.calibration->nvme_requests_of(ranks);
  double per_request = 0, per_byte = 0;
  const bool states = op.swapped == Swapped::OptimizerStates;
  if (costs && states) per_request = read ? costs->read_latency : costs->write_latency;
  if (costs && !states) {
    per_request = read ? costs->tensor_read_latency : costs->tensor_write_latency;
    per_byte = read ? costs->tensor_read_per_byte : costs->tensor_write_per_byte;
  }
  return double(op.io_requests) * per_request +
         double(op.bytes) * (per_byte + ranks / node_bandwidth);
}

}  // namespace

LayerWork layer_work(const Layer& layer, std::int64_t micro_batch, std::int64_t seq_len,
                     bool backward) {
  const double tokens = double(micro_batch) * double(seq_len);
  const double factor = backward ? 2 : 1;
  const ActivationTerms& a = layer.activations;
  return {.matmul_flops = factor * tokens * layer.matmul_flops_per_token,
          .attention_flops =
              factor * tokens * double(seq_len) * layer.attention_flops_per_token_position,
          .elements = tokens * (a.elements + a.elements_per_position * double(seq_len) +
                                a.checkpoint_elements + a.backward_working_elements)};
}

double layer_seconds(const LayerWork& work, const LayerCost& cost) {
  return work.matmul_flops * cost.per_matmul_flop + work.attention_flops * cost.per_attention_flop +
         work.elements * cost.per_element;
}

double cpu_share_of(int ranks, const Cluster& cluster) {
  const int threads = cluster.calibration ? std::max(1, cluster.calibration->threads_per_rank) : 1;
  const int cores = std::max(1, cluster.node.cpu_cores);
  const auto ideal = [&](int count) { return std::max(1.0, double(count) * threads / cores); };
  ranks = std::max(1, ranks);
  const Occupancy* measured = nullptr;
  if (cluster.calibration) {
    for (const Occupancy& o : cluster.calibration->occupancy) {
      if (o.ranks <= ranks && (!measured || o.ranks > measured->ranks)) measured = &o;
    }
  }
  if (!measured) return ideal(ranks);
  return measured->factor * ideal(ranks) / ideal(measured->ranks);
}

double cpu_share(const ScheduleContext& context, const Cluster& cluster) {
  return cpu_share_of(ranks_on_node(context), cluster);
}

CpuOpCost cpu_rank_op_cost(const Op& op, const Schedule& schedule, const Model& model,
                           const Cluster& cluster) {
  if (!cluster.calibration || !cluster.calibration->cpu_ranks()) {
    throw std::logic_error("cpu_rank_op_cost needs a cluster calibrated on the CPU backend");
  }
  const ClusterCalibration& c = *cluster.calibration;
  const EngineCosts& e = c.engine;
  const ScheduleContext& context = schedule.context;
  const double owned = double(schedule.layout.owned);
  switch (op.kind) {
    case OpKind::Forward:
    case OpKind::Recompute:
    case OpKind::Backward: {
      const bool backward = op.kind == OpKind::Backward;
      const Layer& layer = model.layers.at(std::size_t(op.layer));
      return {.work =
                  layer_seconds(layer_work(layer, context.micro_batch, context.seq_len, backward),
                                cost_of(c, layer.kind, backward))};
    }
    case OpKind::AllReduce:
    case OpKind::ReduceScatter:
    case OpKind::AllGather:
    case OpKind::Broadcast:
      return {.work = local_collective_per_byte(op, e) * double(op.bytes),
              .fixed = mpi_seconds(op, c)};
    case OpKind::GradNorm:
    case OpKind::OverflowCheck:
      return {.work = e.norm_per_element * owned, .fixed = mpi_seconds(op, c)};
    case OpKind::OptimizerStep: {
      const double touched = double(op.memory_bytes_touched);
      if (op.stream == Stream::Cpu) return {.work = e.host_optimizer_per_byte * touched};
      const bool mixed = context.precision != Precision::Fp32;
      // Stage 0 holds whole gradients: the step takes their norm itself (no GradNorm op).
      const double norm =
          context.zero_stage().partitions_optimizer_states() ? 0 : e.norm_per_element * owned;
      return {.work = (mixed ? e.mixed_optimizer_per_byte : e.optimizer_per_byte) * touched + norm};
    }
    case OpKind::CopyH2D:
    case OpKind::CopyD2H:
      return {.work = e.copy_per_byte * double(op.bytes)};
    case OpKind::NvmeRead:
    case OpKind::NvmeWrite:
      return {.fixed = nvme_seconds(op, context, cluster)};
    default:
      return {};  // release, loss-scale update: bookkeeping
  }
}

double cpu_rank_op_seconds(const Op& op, const Schedule& schedule, const Model& model,
                           const Cluster& cluster) {
  const CpuOpCost cost = cpu_rank_op_cost(op, schedule, model, cluster);
  return cpu_share(schedule.context, cluster) * cost.work + cost.fixed;
}

}  // namespace zerolens
