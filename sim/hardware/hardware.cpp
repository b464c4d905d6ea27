// Cluster presets and the cluster JSON format (docs/hardware.md).
#include "sim/hardware/hardware.hpp"

#include <map>

#include "sim/core/error.hpp"

namespace zerolens {
namespace {

constexpr double GBps = 1e9;
constexpr double TFLOPs = 1e12;
constexpr double us = 1e-6;

struct GpuRates {
  const char* name;
  Bytes memory;
  double hbm;
  double fp16, bf16, fp32;
};

GpuSpec gpu(const GpuRates& r) {
  return {.name = r.name, .memory_bytes = r.memory, .hbm_bandwidth = r.hbm, .peak_flops_fp16 = r.fp16,
          .peak_flops_bf16 = r.bf16, .peak_flops_fp32 = r.fp32};
}

// Vendor datasheet figures: dense tensor-core peaks (no sparsity), link bandwidths per GPU and
// direction (NVLink: half the bidirectional figure; InfiniBand: one NIC per GPU), usable PCIe
// rates about 80% of the bus's theoretical figure.
Cluster dgx2() {
  Cluster c{.name = "dgx-2", .nodes = 1};
  c.gpu = gpu({"V100-SXM3-32GB", 32 * kBytesPerGiB, 900 * GBps, 125 * TFLOPs, 0, 15.7 * TFLOPs});
  c.node = {.gpus_per_node = 16, .cpu_memory_bytes = 1536 * kBytesPerGiB, .cpu_memory_bandwidth = 200 * GBps,
            .cpu_cores = 48, .nvme_capacity_bytes = Bytes(30'720) * kBytesPerGB, .nvme_read_bandwidth = 16 * GBps,
            .nvme_write_bandwidth = 8 * GBps, .intra_node = {"NVSwitch (NVLink 2)", 150 * GBps, 3 * us},
            .pcie = {"PCIe 3.0 x16", 12 * GBps, 10 * us}};
  c.inter_node = {"InfiniBand EDR", 6.25 * GBps, 5 * us};
  return c;
}

Cluster dgx_a100(bool large) {
  Cluster c{.name = large ? "dgx-a100-80gb" : "dgx-a100-40gb", .nodes = 1};
  c.gpu = large ? gpu({"A100-SXM4-80GB", 80 * kBytesPerGiB, 2039 * GBps, 312 * TFLOPs, 312 * TFLOPs, 19.5 * TFLOPs})
                : gpu({"A100-SXM4-40GB", 40 * kBytesPerGiB, 1555 * GBps, 312 * TFLOPs, 312 * TFLOPs, 19.5 * TFLOPs});
  c.node = {.gpus_per_node = 8, .cpu_memory_bytes = (large ? 2048 : 1024) * kBytesPerGiB,
            .cpu_memory_bandwidth = 300 * GBps, .cpu_cores = 128,
            .nvme_capacity_bytes = Bytes(large ? 30'720 : 15'360) * kBytesPerGB, .nvme_read_bandwidth = 25 * GBps,
            .nvme_write_bandwidth = 12 * GBps, .intra_node = {"NVSwitch (NVLink 3)", 300 * GBps, 2 * us},
            .pcie = {"PCIe 4.0 x16", 25 * GBps, 8 * us}};
  c.inter_node = {"InfiniBand HDR", 25 * GBps, 5 * us};
  return c;
}

Cluster dgx_h100() {
  Cluster c{.name = "dgx-h100", .nodes = 1};
  c.gpu = gpu({"H100-SXM5-80GB", 80 * kBytesPerGiB, 3350 * GBps, 989 * TFLOPs, 989 * TFLOPs, 67 * TFLOPs});
  c.node = {.gpus_per_node = 8, .cpu_memory_bytes = 2048 * kBytesPerGiB, .cpu_memory_bandwidth = 500 * GBps,
            .cpu_cores = 112, .nvme_capacity_bytes = Bytes(30'720) * kBytesPerGB, .nvme_read_bandwidth = 50 * GBps,
            .nvme_write_bandwidth = 25 * GBps, .intra_node = {"NVSwitch (NVLink 4)", 450 * GBps, 2 * us},
            .pcie = {"PCIe 5.0 x16", 50 * GBps, 8 * us}};
  c.inter_node = {"InfiniBand NDR", 50 * GBps, 5 * us};
  return c;
}

// One H100 in a small host (the lent measurement machine: 16 cores, 128 GiB, 64 GiB disk).
Cluster h100_x1() {
  Cluster c = dgx_h100();
  c.name = "h100-x1";
  c.node.gpus_per_node = 1;
  c.node.cpu_memory_bytes = 128 * kBytesPerGiB;
  c.node.cpu_memory_bandwidth = 200 * GBps;
  c.node.cpu_cores = 16;
  c.node.nvme_capacity_bytes = 64 * kBytesPerGiB;
  c.node.nvme_read_bandwidth = 3 * GBps;
  c.node.nvme_write_bandwidth = 2 * GBps;
  return c;
}

const std::map<std::string, Cluster>& presets() {
  static const std::map<std::string, Cluster> table = {{"dgx-2", dgx2()},
                                                       {"dgx-a100-40gb", dgx_a100(false)},
                                                       {"dgx-a100-80gb", dgx_a100(true)},
                                                       {"dgx-h100", dgx_h100()},
                                                       {"h100-x1", h100_x1()}};
  return table;
}

void require_positive(double value, const std::string& where) {
  if (!(value > 0)) throw InputError(where, "must be positive");
}

void validate_link(const LinkSpec& link, const std::string& where) {
  require_positive(link.bandwidth, where + ".bandwidth");
  if (!(link.latency >= 0)) throw InputError(where + ".latency", "must not be negative");
}

}  // namespace

double GpuSpec::peak_flops(Precision precision) const {
  switch (precision) {
    case Precision::Fp16: return peak_flops_fp16;
    case Precision::Bf16: return peak_flops_bf16;
    case Precision::Fp32: return peak_flops_fp32;
  }
  return peak_flops_fp32;
}

void Cluster::validate(const std::string& where) const {
  auto key = [&](const std::string& k) { return where.empty() ? k : where + "." + k; };
  if (nodes < 1) throw InputError(key("nodes"), "must be at least 1");
  if (node.gpus_per_node < 1) throw InputError(key("node.gpus_per_node"), "must be at least 1");
  if (gpu.memory_bytes < 1) throw InputError(key("gpu.memory_bytes"), "must be positive");
  require_positive(gpu.hbm_bandwidth, key("gpu.hbm_bandwidth"));
  require_positive(gpu.peak_flops_fp16, key("gpu.peak_flops_fp16"));
  require_positive(gpu.peak_flops_fp32, key("gpu.peak_flops_fp32"));
  if (gpu.peak_flops_bf16 < 0) throw InputError(key("gpu.peak_flops_bf16"), "must not be negative (0: no bf16)");
  if (node.cpu_memory_bytes < 1) throw InputError(key("node.cpu_memory_bytes"), "must be positive");
  require_positive(node.cpu_memory_bandwidth, key("node.cpu_memory_bandwidth"));
  if (node.cpu_cores < 1) throw InputError(key("node.cpu_cores"), "must be at least 1");
  if (node.nvme_capacity_bytes < 0) throw InputError(key("node.nvme_capacity_bytes"), "must not be negative");
  if (node.nvme_capacity_bytes > 0) {
    require_positive(node.nvme_read_bandwidth, key("node.nvme_read_bandwidth"));
    require_positive(node.nvme_write_bandwidth, key("node.nvme_write_bandwidth"));
  }
  validate_link(node.intra_node, key("node.intra_node"));
  validate_link(node.pcie, key("node.pcie"));
  validate_link(inter_node, key("inter_node"));
}

std::vector<std::string> cluster_preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, cluster] : presets()) names.push_back(name);
  return names;
}

Cluster cluster_from_preset(const std::string& name) {
  const auto it = presets().find(name);
  if (it != presets().end()) return it->second;
  const std::string hint = closest_name(name, cluster_preset_names());
  throw InputError("--cluster", "unknown cluster preset '" + name + "'" +
                                    (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
                                    "; presets: dgx-2, dgx-a100-40gb, dgx-a100-80gb, dgx-h100, h100-x1, or a JSON file");
}

const GroupCollectives* ClusterCalibration::collectives_of(int group) const {
  const GroupCollectives* best = nullptr;
  for (const GroupCollectives& c : collectives) {
    if (c.ranks <= group && (!best || c.ranks > best->ranks)) best = &c;
  }
  return best;
}

const NvmeRequestCosts* ClusterCalibration::nvme_requests_of(int swapping) const {
  const NvmeRequestCosts* best = nullptr;
  for (const NvmeRequestCosts& c : nvme_requests) {
    if (c.ranks <= swapping && (!best || c.ranks > best->ranks)) best = &c;
  }
  return best || nvme_requests.empty() ? best : &nvme_requests.front();
}

Cluster with_ranks(Cluster cluster, int dp_size, int gpus_per_node) {
  if (dp_size < 1) throw InputError("--gpus", "must be at least 1");
  if (gpus_per_node > 0) cluster.node.gpus_per_node = gpus_per_node;
  cluster.nodes = int(ceil_div(dp_size, cluster.node.gpus_per_node));
  return cluster;
}

}  // namespace zerolens
