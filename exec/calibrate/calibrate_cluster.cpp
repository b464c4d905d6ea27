// From measurements to the simulator's cluster description, and the measurements as JSON.
// docs/calibrate.md documents the mapping field by field.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "exec/calibrate/calibrate.hpp"
#include "sim/hardware/cluster_json.hpp"

namespace zerolens::exec {
namespace {

double best_rate(const std::vector<GemmRate>& rates) {
  double rate = 0;
  for (const auto& gemm : rates) rate = std::max(rate, gemm.flops_per_second);
  return rate;
}

// The simulator prices either direction at one PCIe bandwidth: the harmonic mean makes equal bytes
// each way take exactly the measured total time.
double pcie_bandwidth(const GpuCalibration& gpu) {
  return 2 / (1 / gpu.h2d_bytes_per_second + 1 / gpu.d2h_bytes_per_second);
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
  const std::string over =
      c.gpu ? c.gpu->collective_backend + " between GPUs" : std::string("MPI between ranks");
  return {over + " (measured)", bandwidth / at_largest, latency / at_smallest};
}

LinkSpec intra_node_link(const Calibration& c) {
  if (!c.collectives.empty()) return measured_link(c);
  if (c.gpu)
    return {"not measured (1 rank): device memory copy", c.gpu->hbm_bytes_per_second, 0};
  return {"not measured (1 rank): host memory copy", c.copy_bytes_per_second, 0};
}

GpuSpec host_rank(const Calibration& c) {
  const double flops = best_rate(c.gemm);  // the CPU kernels compute every precision in fp32
  return {"CPU rank (" + c.cpu_model + ", " + std::to_string(c.threads) + " threads)",
          c.host_memory / c.ranks,
          c.triad_bytes_per_second,
          flops,
          flops,
          flops};
}

// fp16 runs on the same tensor cores as bf16 at the same rate on A100/H100: priced as bf16.
GpuSpec measured_gpu(const GpuCalibration& gpu) {
  const double bf16 = best_rate(gpu.gemm_bf16);
  return {gpu.name, gpu.memory_bytes, gpu.hbm_bytes_per_second, bf16, bf16,
          best_rate(gpu.gemm_fp32)};
}

nlohmann::json gemm_json(const std::vector<GemmRate>& rates) {
  nlohmann::json gemm = nlohmann::json::array();
  for (const auto& g : rates)
    gemm.push_back({{"n", g.n}, {"seconds", g.seconds}, {"flops_per_second", g.flops_per_second}});
  return gemm;
}

nlohmann::json gpu_json(const GpuCalibration& g) {
  return {{"name", g.name},
          {"memory_bytes", g.memory_bytes},
          {"free_bytes", g.free_bytes},
          {"gemm_fp32", gemm_json(g.gemm_fp32)},
          {"gemm_bf16", gemm_json(g.gemm_bf16)},
          {"hbm",
           {{"counting", "device-to-device copy, read + write: 2 x size bytes"},
            {"copy_bytes", g.copy_bytes},
            {"bytes_per_second", g.hbm_bytes_per_second}}},
          {"pcie",
           {{"counting", "pinned host buffer, size bytes per direction"},
            {"transfer_bytes", g.transfer_bytes},
            {"h2d_bytes_per_second", g.h2d_bytes_per_second},
            {"d2h_bytes_per_second", g.d2h_bytes_per_second}}},
          {"collective_backend", g.collective_backend},
          {"backend_reason", g.backend_reason}};
}

// What marks the cluster as measured, and the CPU backend's own costs (docs/calibrate.md). On a
// GPU the collectives of the whole group are the one measured group.
ClusterCalibration cluster_calibration(const Calibration& c) {
  ClusterCalibration calibration;
  calibration.device = c.gpu ? "cuda" : "cpu";
  calibration.ranks = c.ranks;
  calibration.threads_per_rank = c.threads;
  if (c.gpu) {
    if (!c.collectives.empty())
      calibration.collectives = {fit_group_collectives(c.ranks, c.collectives)};
    return calibration;
  }
  calibration.collectives = c.group_collectives;
  calibration.occupancy = c.occupancy;
  calibration.reference_step_seconds = c.reference_step_seconds;
  calibration.nvme_requests = c.nvme_requests;
  calibration.forward = c.layer_forward;
  calibration.backward = c.layer_backward;
  calibration.engine = c.engine;
  return calibration;
}

nlohmann::json cost_json(const LayerCost& cost) {
  return {{"per_matmul_flop", cost.per_matmul_flop},
          {"per_attention_flop", cost.per_attention_flop},
          {"per_element", cost.per_element}};
}

nlohmann::json cpu_backend_json(const Calibration& c) {
  nlohmann::json timings = nlohmann::json::array();
  for (const LayerTiming& t : c.layer_timings) {
    timings.push_back({{"shape",
                        {{"hidden", t.shape.hidden},
                         {"heads", t.shape.heads},
                         {"vocab", t.shape.vocab},
                         {"seq_len", t.shape.seq_len},
                         {"micro_batch", t.shape.micro_batch}}},
                       {"layer", to_string(t.kind)},
                       {"direction", t.backward ? "backward" : "forward"},
                       {"matmul_flops", t.work.matmul_flops},
                       {"attention_flops", t.work.attention_flops},
                       {"elements", t.work.elements},
                       {"seconds", t.seconds},
                       {"fitted_seconds",  // alone, as the grid was timed
                        layer_seconds(t.work, t.backward ? c.layer_backward[std::size_t(t.kind)]
                                                         : c.layer_forward[std::size_t(t.kind)]) /
                            c.in_step[std::size_t(t.kind)][t.backward ? 1 : 0]}});
  }
  nlohmann::json costs = nlohmann::json::object();
  nlohmann::json in_step = nlohmann::json::object();
  for (int k = 0; k < kLayerKindCount; ++k) {
    costs[to_string(LayerKind(k))] = {{"forward", cost_json(c.layer_forward[std::size_t(k)])},
                                      {"backward", cost_json(c.layer_backward[std::size_t(k)])}};
    in_step[to_string(LayerKind(k))] = {{"forward", c.in_step[std::size_t(k)][0]},
                                        {"backward", c.in_step[std::size_t(k)][1]}};
  }
  const EngineCosts& e = c.engine;
  nlohmann::json occupancy = nlohmann::json::array();
  for (const Occupancy& o : c.occupancy)
    occupancy.push_back({{"ranks", o.ranks}, {"factor", o.factor}});
  return {{"layer_timings", timings},
          {"occupancy", occupancy},
          {"nvme_requests", nvme_requests_json(c.nvme_requests)},
          {"reference_step_seconds", c.reference_step_seconds},
          {"layer_costs", costs},
          {"layer_in_step", in_step},
          {"group_collectives", group_collectives_json(c.group_collectives)},
          {"engine",
           {{"all_reduce_per_byte", e.all_reduce_per_byte},
            {"reduce_scatter_per_byte", e.reduce_scatter_per_byte},
            {"all_gather_per_byte", e.all_gather_per_byte},
            {"all_reduce_fp32_per_byte", e.all_reduce_fp32_per_byte},
            {"reduce_scatter_fp32_per_byte", e.reduce_scatter_fp32_per_byte},
            {"all_gather_fp32_per_byte", e.all_gather_fp32_per_byte},
            {"norm_per_element", e.norm_per_element},
            {"optimizer_per_byte", e.optimizer_per_byte},
            {"mixed_optimizer_per_byte", e.mixed_optimizer_per_byte},
            {"host_optimizer_per_byte", e.host_optimizer_per_byte},
            {"copy_per_byte", e.copy_per_byte}}}};
}

}  // namespace

Cluster calibrated_cluster(const Calibration& c, const std::string& name) {
  Cluster cluster;
  cluster.name = name.empty() ? "calibrated-" + c.host : name;
  cluster.nodes = 1;
  cluster.gpu = c.gpu ? measured_gpu(*c.gpu) : host_rank(c);
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
  node.pcie = c.gpu
                  ? LinkSpec{"PCIe host<->device (measured, pinned)", pcie_bandwidth(*c.gpu), 0}
                  : LinkSpec{"host memory copy (CPU backend: no PCIe)", c.copy_bytes_per_second, 0};
  cluster.inter_node = node.intra_node;
  cluster.inter_node.name = "not measured (one node): intra_node's figures";
  cluster.calibration = cluster_calibration(c);
  cluster.validate("calibrated cluster");
  return cluster;
}

nlohmann::json calibration_to_json(const Calibration& c) {
  nlohmann::json collectives = nlohmann::json::array();
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
      {"gemm_fp32", gemm_json(c.gemm)},
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
      {"nvme", nullptr},
      {"gpu", c.gpu ? gpu_json(*c.gpu) : nlohmann::json(nullptr)},
      {"cpu_backend", c.gpu ? nlohmann::json(nullptr) : cpu_backend_json(c)}};
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
                        {"available_bytes", n.available_bytes},
                        {"request_bytes", n.request_bytes},
                        {"write_request_seconds", n.write_request_seconds},
                        {"read_request_seconds", n.read_request_seconds},
                        {"write_latency", n.write_latency},
                        {"read_latency", n.read_latency}};
  }
  return document;
}

}  // namespace zerolens::exec
