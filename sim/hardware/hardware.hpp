#pragma once
// Cluster description: nodes x GPUs per node, per-GPU memory/bandwidth/peak FLOP/s, links, and
// per-node CPU memory and NVMe. Bandwidths are bytes per second in one direction; latencies are
// seconds; FLOP/s are dense peak rates.
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sim/config/config.hpp"
#include "sim/core/error.hpp"
#include "sim/core/units.hpp"

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

struct Cluster {
  std::string name;
  int nodes = 1;
  GpuSpec gpu;
  NodeSpec node;
  LinkSpec inter_node;  // per-GPU injection bandwidth across nodes

  int total_gpus() const { return nodes * node.gpus_per_node; }
  void validate(const std::string& where) const;
};

std::vector<std::string> cluster_preset_names();
Cluster cluster_from_preset(const std::string& name);  // throws InputError for unknown names

// Resizes the cluster to `dp_size` ranks (gpus_per_node may be overridden, <= 0 keeps the preset's):
// nodes = ceil(dp_size / gpus_per_node). Throws InputError when dp_size < 1.
Cluster with_ranks(Cluster cluster, int dp_size, int gpus_per_node);

}  // namespace zerolens
