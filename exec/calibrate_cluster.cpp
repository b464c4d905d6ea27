// From measurements to the simulator's cluster description, and the measurements as JSON.
// docs/calibrate.md documents the mapping field by field.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "exec/calibrate.hpp"

namespace zerolens::exec {
namespace {

double best_gemm_rate(const Calibration& c) {
  double rate = 0;
  for (const auto& gemm : c.gemm) rate = std::max(rate, gemm.flops_per_second);
  return rate;
}

// Ranks > 1: the mean bus bandwidth of the three collectives at the largest message, and the
// latency per ring step of the smallest (the simulator's ring: phases x (N - 1) steps).
LinkSpec measured_link(const Calibration& c) {
  Bytes largest = 0, smallest = 0;
  for (const auto& rate : c.collectives) {
    largest = std::max(largest, rate.bytes);
    smallest = smallest == 0 ? rate.bytes : std::min(smallest, rate.bytes);
  }
  double bandwidth = 0, latency = 0;
  int at_largest = 0, at_smallest = 0;
  for (const auto& rate : c.collectives) {
    const double phases = rate.kind == OpKind::AllReduce ? 2 : 1;
    if (rate.bytes == largest) {
      bandwidth += rate.busbw;
      ++at_largest;
    }
    if (rate.bytes == smallest) {
      latency += rate.seconds / (phases * (c.ranks - 1));
      ++at_smallest;
    }
  }
  return {"MPI between ranks (measured)", bandwidth / at_largest, latency / at_smallest};
}

LinkSpec intra_node_link(const Calibration& c) {
  if (!c.collectives.empty()) return measured_link(c);
  return {"not measured (1 rank): host memory copy", c.copy_bytes_per_second, 0};
}

}  // namespace

Cluster calibrated_cluster(const Calibration& c, const std::string& name) {
  Cluster cluster;
  cluster.name = name.empty() ? "calibrated-" + c.host : name;
  cluster.nodes = 1;
  const double flops = best_gemm_rate(c);
  cluster.gpu = {"CPU rank (" + c.cpu_model + ", " + std::to_string(c.threads) + " threads)",
                 c.host_memory / c.ranks,
                 c.triad_bytes_per_second,
                 flops,  // the CPU kernels compute every precision in fp32
                 flops,
                 flops};
  NodeSpec& node = cluster.node;
  node.gpus_per_node = c.ranks;
  node.cpu_memory_bytes = c.host_memory;
  node.cpu_memory_bandwidth = c.triad_bytes_per_second * c.ranks;
  node.cpu_cores = c.cpu_cores;
  if (c.nvme) {
    node.nvme_capacity_bytes = c.nvme->available_bytes;
    node.nvme_read_bandwidth = c.nvme->read_bytes_per_second;
    // The engine rewrites its swap files every step: price NVMe writes as overwrites.
    node.nvme_write_bandwidth = c.nvme->overwrite_bytes_per_second;
  }
  node.intra_node = intra_node_link(c);
  node.pcie = {"host memory copy (CPU backend: no PCIe)", c.copy_bytes_per_second, 0};
  cluster.inter_node = node.intra_node;
  cluster.inter_node.name = "not measured (one node): intra_node's figures";
  cluster.validate("calibrated cluster");
  return cluster;
}

nlohmann::json calibration_to_json(const Calibration& c) {
  nlohmann::json gemm = nlohmann::json::array(), collectives = nlohmann::json::array();
  for (const auto& g : c.gemm)
    gemm.push_back({{"n", g.n}, {"seconds", g.seconds}, {"flops_per_second", g.flops_per_second}});
  for (const auto& r : c.collectives) {
    collectives.push_back({{"collective", to_string(r.kind)},
                           {"bytes", r.bytes},
                           {"seconds", r.seconds},
                           {"algbw", r.algbw},
                           {"busbw", r.busbw}});
  }
  nlohmann::json document = {
      {"schema", "zerolens.calibration"},
      {"version", 1},
      {"host",
       {{"name", c.host},
        {"cpu", c.cpu_model},
        {"cores", c.cpu_cores},
        {"memory_bytes", c.host_memory},
        {"ranks", c.ranks},
        {"threads_per_rank", c.threads}}},
      {"gemm_fp32", gemm},
      {"memory",
       {{"counting", "STREAM, float32: copy 8 bytes, triad 12 bytes per element"},
        {"copy_bytes_per_second", c.copy_bytes_per_second},
        {"triad_bytes_per_second", c.triad_bytes_per_second}}},
      {"adam",
       {{"bytes_per_parameter", kAdamBytesPerParameter},
        {"parameters_per_second", c.adam_parameters_per_second},
        {"bytes_per_second", c.adam_bytes_per_second},
        {"over_triad", c.adam_over_triad()}}},
      {"collectives", collectives},
      {"nvme", nullptr}};
  if (c.nvme) {
    const NvmeRate& n = *c.nvme;
    document["nvme"] = {{"path", n.path},
                        {"mode", to_string(n.mode)},
                        {"mode_reason", n.mode_reason},
                        {"bytes_per_rank", n.bytes_per_rank},
                        {"block_size", n.block_size},
                        {"queue_depth", n.queue_depth},
                        {"write_bytes_per_second", n.write_bytes_per_second},
                        {"overwrite_bytes_per_second", n.overwrite_bytes_per_second},
                        {"read_bytes_per_second", n.read_bytes_per_second},
                        {"available_bytes", n.available_bytes}};
  }
  return document;
}

}  // namespace zerolens::exec
