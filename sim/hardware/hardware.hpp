#pragma once
// Cluster description: nodes x GPUs per node, per-GPU memory/bandwidth/peak FLOP/s, links, and
// per-node CPU memory and NVMe. Bandwidths are bytes per second in one direction; latencies are
// seconds; FLOP/s are dense peak rates.
#include <array>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sim/config/config.hpp"
#include "sim/core/error.hpp"
#include "sim/core/units.hpp"
#include "sim/model/model.hpp"

namespace zerolens {

struct LinkSpec {
  std::string name;          // "NVLink", "InfiniBand", "PCIe"
  double bandwidth = 0;      // bytes/s per GPU, one direction
  double latency = 0;        // seconds per message
};

struct GpuSpec {
  std::string name;
  Bytes memory_bytes = 0;
  double hbm_bandwidth = 0;  // bytes/s
  double peak_flops_fp16 = 0;
  double peak_flops_bf16 = 0;
  double peak_flops_fp32 = 0;
  double peak_flops(Precision precision) const;
};

struct NodeSpec {
  int gpus_per_node = 8;
  Bytes cpu_memory_bytes = 0;
  double cpu_memory_bandwidth = 0;  // bytes/s
  int cpu_cores = 0;
  Bytes nvme_capacity_bytes = 0;
  double nvme_read_bandwidth = 0;   // bytes/s, whole node
  double nvme_write_bandwidth = 0;  // bytes/s, whole node
  LinkSpec intra_node;              // GPU-GPU inside a node
  LinkSpec pcie;                    // host-device, per GPU
};

// A CPU rank's cost of one layer kind in one direction (the executor's GPT-2 layers on the host
// kernels): seconds per unit of the work the schedule gives the op.
struct LayerCost {
  double per_matmul_flop = 0;     // seconds per FLOP of matrix products
  double per_attention_flop = 0;  // seconds per FLOP of attention scores and values
  double per_element = 0;  // seconds per activation element the layer keeps (ActivationTerms)
};

inline constexpr int kLayerKindCount = int(LayerKind::Generic) + 1;

// The CUDA backend's collectives, or the CPU backend's (MPI), over a group of `ranks` on one node,
// as calibrate timed them: t(S) = latency + traffic(S) / bandwidth, traffic per the ring algorithm
// (sim/schedule/comm.hpp), the other ranks idle.
struct GroupCollectives {
  int ranks = 2;
  double latency = 0;    // seconds per call
  double bandwidth = 0;  // bus bytes per second
};

// The engine's own work on one CPU rank beside the layers and MPI, per unit of an op's size:
// calibrate times the engine on one rank over reference plans (docs/calibrate.md).
struct EngineCosts {
  double all_reduce_per_byte = 0;       // all-reduce: per message byte (buckets, casts, averaging)
  double reduce_scatter_per_byte = 0;   // reduce-scatter: per message byte
  double all_gather_per_byte = 0;       // all-gather: per message byte
  double norm_per_element = 0;          // gradient norm / overflow check: per owned element
  double optimizer_per_byte = 0;        // the device optimizer step, fp32: per byte touched
  double mixed_optimizer_per_byte = 0;  // the same with 16-bit parameters (casts to and from fp32)
  double host_optimizer_per_byte = 0;   // the host (offloaded) optimizer: per byte touched
  double copy_per_byte = 0;             // host <-> device copies (host memory on the CPU backend)
};

// How much longer a rank's own work takes when `ranks` ranks share the node (each with its
// threads), all working and waiting for each other, than when it has the node to itself: calibrate
// times the engine's step in lock step at that many ranks. Beyond the cores the kernel's
// scheduler shares them out (ideally ranks x threads / cores); at or below, siblings sharing a
// physical core and the slowest rank set the pace.
struct Occupancy {
  int ranks = 1;
  double factor = 1;
};

// What `zerolens calibrate` measured beyond the datasheet fields (docs/calibrate.md). Present only
// in a cluster calibrate wrote: a step time predicted on it is compared with the executor's
// (`validate`, `check-measured`); on a preset or hand-written cluster it is not.
struct ClusterCalibration {
  std::string device = "cpu";  // "cpu": every GPU is an MPI rank of the CPU backend; "cuda"
  int ranks = 1;               // MPI ranks calibrate ran
  int threads_per_rank = 1;    // OpenMP threads of the host kernels
  std::vector<GroupCollectives> collectives;  // per group size, ascending
  // device "cpu": what one rank's thread costs with the node to itself, and how that grows with
  // the ranks on the node (ascending; none: the ideal sharing of the cores alone).
  std::array<LayerCost, kLayerKindCount> forward{}, backward{};  // by LayerKind
  std::vector<Occupancy> occupancy;
  EngineCosts engine;
  // What an NVMe request costs beyond its bytes at the node's rates (seconds; 0 without
  // --nvme-path): the engine reads and writes a sub-group, or a tensor, per request.
  double nvme_read_latency = 0, nvme_write_latency = 0;
  // device "cpu": the engine's reference step (docs/calibrate.md) on one rank with the node to
  // itself, seconds (0: not measured): how fast the machine was when calibrated, for comparing
  // calibrations of a host whose speed drifts. The prediction does not use it.
  double reference_step_seconds = 0;

  bool cpu_ranks() const { return device == "cpu"; }
  // The collectives of a group of `ranks` (the largest measured group not above it; nullptr when
  // none was measured).
  const GroupCollectives* collectives_of(int ranks) const;
};

struct Cluster {
  std::string name;
  int nodes = 1;
  GpuSpec gpu;
  NodeSpec node;
  LinkSpec inter_node;  // per-GPU injection bandwidth across nodes
  std::optional<ClusterCalibration> calibration;  // none: datasheet figures

  int total_gpus() const { return nodes * node.gpus_per_node; }
  void validate(const std::string& where) const;
};

std::vector<std::string> cluster_preset_names();
Cluster cluster_from_preset(const std::string& name);  // throws InputError for unknown names

// Resizes the cluster to `dp_size` ranks (gpus_per_node may be overridden, <= 0 keeps the preset's):
// nodes = ceil(dp_size / gpus_per_node). Throws InputError when dp_size < 1.
Cluster with_ranks(Cluster cluster, int dp_size, int gpus_per_node);

}  // namespace zerolens
