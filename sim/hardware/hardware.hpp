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
// The CPU backend also times its 16-bit reductions (all-reduce, reduce-scatter of fp16/bf16, which
// MPI reduces through a user-defined op that widens, adds and rounds every element: a 1 MiB bf16
// all-reduce over 2 ranks took 2.4 ms against 0.30 ms in fp32 on the development VM; a 16-bit
// all-gather reduces nothing and moves bytes as fp32's do); 0 where not measured (fp32's figures
// stand in).
struct GroupCollectives {
  int ranks = 2;
  double latency = 0;    // seconds per call
  double bandwidth = 0;  // bus bytes per second
  double sixteen_bit_reduce_latency = 0, sixteen_bit_reduce_bandwidth = 0;
};

// The engine's own work on one CPU rank beside the layers and MPI, per unit of an op's size:
// calibrate times the engine on one rank over reference plans (docs/calibrate.md).
// A collective's work depends on its wire format (16-bit buffers are widened to fp32 around it):
// the *_per_byte figures are 16-bit messages', the *_fp32_per_byte ones fp32 messages' (0: not
// measured, the 16-bit figure stands in).
struct EngineCosts {
  double all_reduce_per_byte = 0;       // all-reduce: per message byte (buckets, casts, averaging)
  double reduce_scatter_per_byte = 0;   // reduce-scatter: per message byte
  double all_gather_per_byte = 0;       // all-gather: per message byte
  double all_reduce_fp32_per_byte = 0, reduce_scatter_fp32_per_byte = 0,
         all_gather_fp32_per_byte = 0;
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

// What an NVMe request of the engine costs beyond its bytes at the node's rates (seconds) while
// `ranks` ranks of the node swap at once, as in their steps: the drive serves the ranks' requests
// side by side, and a small request's fixed cost need not overlap (on the development VM's disk,
// 360 KB O_DIRECT reads took 0.29 ms alone, 0.52 ms two at a time, 1.07 ms four at a time).
// An optimizer sub-group is one request (read_latency, write_latency); a parameter swap issues one
// request per tensor partition, together and asynchronously, each costing tensor_read_latency or
// tensor_write_latency (they overlap, so far less than a lone request), and each byte of them
// tensor_read_per_byte or tensor_write_per_byte beyond the node's rate: requests of a few to a few
// tens of KB through O_DIRECT do not stream at the rate of 1 MiB pieces eight deep (on the VM, the
// write-back of GPT-2's 2 blocks took 3.5, 4.3 and 6.3 ms at hidden 64, 128 and 256: about 90 us
// a request and 0.6 GB/s per rank, where the node's overwrite rate is 4 GB/s).
struct NvmeRequestCosts {
  int ranks = 1;
  double read_latency = 0, write_latency = 0;
  double tensor_read_latency = 0, tensor_write_latency = 0;
  double tensor_read_per_byte = 0, tensor_write_per_byte = 0;  // seconds per byte
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
  // What an NVMe request costs beyond its bytes at the node's rates, per count of ranks swapping
  // at once (ascending; none without --nvme-path): the engine reads and writes a sub-group, or a
  // tensor, per request.
  std::vector<NvmeRequestCosts> nvme_requests;
  // device "cpu": the engine's reference step (docs/calibrate.md) on one rank with the node to
  // itself, seconds (0: not measured): how fast the machine was when calibrated, for comparing
  // calibrations of a host whose speed drifts. The prediction does not use it.
  double reference_step_seconds = 0;

  bool cpu_ranks() const { return device == "cpu"; }
  // The collectives of a group of `ranks` (the largest measured group not above it; nullptr when
  // none was measured).
  const GroupCollectives* collectives_of(int ranks) const;
  // The NVMe request costs of `swapping` ranks swapping at once (the largest measured count not
  // above it, else the smallest measured; nullptr when none was measured).
  const NvmeRequestCosts* nvme_requests_of(int swapping) const;
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
