#pragma once
// The step of zerolens's CPU backend, priced with the figures `zerolens calibrate` measured on the
// machine (Cluster::calibration, device "cpu"; docs/calibrate.md):
//   - one thread per rank runs every op in program order: no stream overlaps another;
//   - the ranks on a node share its cores: every op's own work takes `share` times as long as
//     with the node to itself: the calibrated occupancy factor of that many ranks (the largest
//     measured count not above, scaled by the ideal sharing max(1, ranks x threads / cores)
//     beyond it; the ideal sharing alone when none was measured);
//   - a layer's forward, recompute or backward: its matrix-product FLOPs, attention FLOPs and
//     activation elements (layer_work) at the calibrated seconds per unit of its layer kind;
//   - a collective: the engine's own work per message byte, plus, over more than one rank, the
//     calibrated latency per call and bus bandwidth of a group of that size (t = latency +
//     traffic / bandwidth, traffic per the ring algorithm, sim/schedule/comm.hpp);
//   - the optimizer step: its bytes touched at the calibrated cost per byte (device, 16-bit or
//     fp32 parameters, or host); a stage-0 step also takes the gradient norm over every element;
//   - gradient norm and overflow check: per owned element, plus a scalar collective;
//   - host <-> device copies: per byte; NVMe: the request's calibrated cost with the node's ranks
//     swapping at once, plus bytes / (node bandwidth / ranks on the node).
#include "sim/hardware/hardware.hpp"
#include "sim/model/model.hpp"
#include "sim/schedule/schedule.hpp"

namespace zerolens {

// The work of one layer op, as the CPU-rank costs are counted (calibrate fits them on the same
// figures): forward FLOPs (backward: twice) and the activation elements the layer writes
// (ActivationTerms: what it keeps, elements + elements per position x sequence, its checkpoint,
// and the input gradient its backward works in), per token of the micro-batch.
struct LayerWork {
  double matmul_flops = 0;
  double attention_flops = 0;
  double elements = 0;
};
LayerWork layer_work(const Layer& layer, std::int64_t micro_batch, std::int64_t seq_len,
                     bool backward);

// Seconds of `work` at `cost`.
double layer_seconds(const LayerWork& work, const LayerCost& cost);

// How many times longer a rank's own work takes with `ranks` ranks of the node at work than alone
// (above), and with every rank of `context`'s node at work.
double cpu_share_of(int ranks, const Cluster& cluster);
double cpu_share(const ScheduleContext& context, const Cluster& cluster);

// One op on a CPU rank: `work` is the rank's own work in seconds alone on the node (it stretches
// by the share of the ranks at work beside it), `fixed` what no core sharing stretches: MPI's
// latency and bus time, NVMe requests and bytes.
struct CpuOpCost {
  double work = 0;
  double fixed = 0;
};
CpuOpCost cpu_rank_op_cost(const Op& op, const Schedule& schedule, const Model& model,
                           const Cluster& cluster);

// Seconds of one op on a CPU rank (the cluster must be calibrated with device "cpu").
double cpu_rank_op_seconds(const Op& op, const Schedule& schedule, const Model& model,
                           const Cluster& cluster);

}  // namespace zerolens
