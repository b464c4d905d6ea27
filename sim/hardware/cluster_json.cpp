// Cluster JSON: numbers in base units (bytes, bytes/s, seconds, FLOP/s) or strings with a unit
// ("80 GiB", "300 GB/s", "200 Gb/s", "5 us", "312 TFLOP/s"). A "base" preset may be extended.
#include <cctype>
#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "sim/core/json_read.hpp"
#include "sim/hardware/cluster_json.hpp"

namespace zerolens {
namespace {

using nlohmann::json;
using namespace json_read;

enum class Quantity { Bytes, Bandwidth, Seconds, Flops };

const std::map<std::string, double>& unit_scale(Quantity quantity) {
  static const std::map<std::string, double> bytes = {
      {"B", 1},     {"KB", 1e3},          {"MB", 1e6},          {"GB", 1e9},          {"TB", 1e12},
      {"PB", 1e15}, {"KiB", 1024.0},      {"MiB", 1048576.0},   {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  static const std::map<std::string, double> bandwidth = [] {
    std::map<std::string, double> m;
    for (const auto& [unit, scale] : bytes) m[unit + "/s"] = scale;
    for (const auto& [unit, scale] : std::map<std::string, double>{{"Kb/s", 1e3}, {"Mb/s", 1e6}, {"Gb/s", 1e9}, {"Tb/s", 1e12},
                                                                  {"Gbit/s", 1e9}, {"Mbit/s", 1e6}}) {
      m[unit] = scale / 8;
    }
    return m;
  }();
  static const std::map<std::string, double> seconds = {{"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};
  static const std::map<std::string, double> flops = {{"FLOP/s", 1}, {"GFLOP/s", 1e9}, {"TFLOP/s", 1e12},
                                                      {"PFLOP/s", 1e15}, {"GFLOPS", 1e9}, {"TFLOPS", 1e12},
                                                      {"PFLOPS", 1e15}};
  switch (quantity) {
    case Quantity::Bytes: return bytes;
    case Quantity::Bandwidth: return bandwidth;
    case Quantity::Seconds: return seconds;
    case Quantity::Flops: return flops;
  }
  return bytes;
}

double quantity(const json& value, const std::string& where, Quantity kind) {
  if (value.is_number()) return as_double(value, where, 0, 1e21);
  if (!value.is_string()) throw InputError(where, "must be a number or a string with a unit, got " + type_phrase(value));
  const std::string text = value.get<std::string>();
  std::size_t used = 0;
  double number = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    throw InputError(where, "expected a number with a unit such as \"80 GiB\", got \"" + text + "\"");
  }
  std::string unit = text.substr(used);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(0, 1);
  const auto& scales = unit_scale(kind);
  const auto it = scales.find(unit);
  if (it == scales.end()) {
    std::vector<std::string> names;
    for (const auto& [name, scale] : scales) names.push_back(name);
    const std::string hint = closest_name(unit, names);
    throw InputError(where, "unknown unit '" + unit + "'" + (hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
  }
  const double result = number * it->second;
  if (!std::isfinite(result) || result < 0 || result > 1e21) throw InputError(where, "must be between 0 and 1e21");
  return result;
}

Bytes bytes_value(const json& value, const std::string& where) {
  const double bytes = quantity(value, where, Quantity::Bytes);
  if (bytes > 0x1p62) throw InputError(where, "must be at most 2^62 bytes");
  return Bytes(std::llround(bytes));
}

void read_link(const json& block, const std::string& where, LinkSpec& link, Diagnostics& diagnostics) {
  as_object(block, where);
  warn_unknown_keys(block, {"name", "bandwidth", "latency"}, where, diagnostics);
  if (const json* v = member(block, "name")) link.name = as_string(*v, join_key(where, "name"));
  if (const json* v = member(block, "bandwidth")) link.bandwidth = quantity(*v, join_key(where, "bandwidth"), Quantity::Bandwidth);
  if (const json* v = member(block, "latency")) link.latency = quantity(*v, join_key(where, "latency"), Quantity::Seconds);
}

void read_gpu(const json& block, GpuSpec& gpu, Diagnostics& diagnostics) {
  const std::string w = "gpu";
  as_object(block, w);
  warn_unknown_keys(block, {"name", "memory_bytes", "hbm_bandwidth", "peak_flops_fp16", "peak_flops_bf16", "peak_flops_fp32"},
                    w, diagnostics);
  if (const json* v = member(block, "name")) gpu.name = as_string(*v, "gpu.name");
  if (const json* v = member(block, "memory_bytes")) gpu.memory_bytes = bytes_value(*v, "gpu.memory_bytes");
  if (const json* v = member(block, "hbm_bandwidth")) gpu.hbm_bandwidth = quantity(*v, "gpu.hbm_bandwidth", Quantity::Bandwidth);
  if (const json* v = member(block, "peak_flops_fp16")) gpu.peak_flops_fp16 = quantity(*v, "gpu.peak_flops_fp16", Quantity::Flops);
  if (const json* v = member(block, "peak_flops_bf16")) gpu.peak_flops_bf16 = quantity(*v, "gpu.peak_flops_bf16", Quantity::Flops);
  if (const json* v = member(block, "peak_flops_fp32")) gpu.peak_flops_fp32 = quantity(*v, "gpu.peak_flops_fp32", Quantity::Flops);
}

void read_node(const json& block, NodeSpec& node, Diagnostics& diagnostics) {
  const std::string w = "node";
  as_object(block, w);
  warn_unknown_keys(block, {"gpus_per_node", "cpu_memory_bytes", "cpu_memory_bandwidth", "cpu_cores", "nvme_capacity_bytes",
                            "nvme_read_bandwidth", "nvme_write_bandwidth", "intra_node", "pcie"},
                    w, diagnostics);
  if (const json* v = member(block, "gpus_per_node")) node.gpus_per_node = int(as_int(*v, "node.gpus_per_node", 1, 1024));
  if (const json* v = member(block, "cpu_memory_bytes")) node.cpu_memory_bytes = bytes_value(*v, "node.cpu_memory_bytes");
  if (const json* v = member(block, "cpu_memory_bandwidth")) {
    node.cpu_memory_bandwidth = quantity(*v, "node.cpu_memory_bandwidth", Quantity::Bandwidth);
  }
  if (const json* v = member(block, "cpu_cores")) node.cpu_cores = int(as_int(*v, "node.cpu_cores", 1, 1 << 20));
  if (const json* v = member(block, "nvme_capacity_bytes")) node.nvme_capacity_bytes = bytes_value(*v, "node.nvme_capacity_bytes");
  if (const json* v = member(block, "nvme_read_bandwidth")) {
    node.nvme_read_bandwidth = quantity(*v, "node.nvme_read_bandwidth", Quantity::Bandwidth);
  }
  if (const json* v = member(block, "nvme_write_bandwidth")) {
    node.nvme_write_bandwidth = quantity(*v, "node.nvme_write_bandwidth", Quantity::Bandwidth);
  }
  if (const json* v = member(block, "intra_node")) read_link(*v, "node.intra_node", node.intra_node, diagnostics);
  if (const json* v = member(block, "pcie")) read_link(*v, "node.pcie", node.pcie, diagnostics);
}

json link_json(const LinkSpec& link) {
  return {{"name", link.name}, {"bandwidth", link.bandwidth}, {"latency", link.latency}};
}

}  // namespace

Cluster cluster_from_json(const json& document, Diagnostics& diagnostics) {
  as_object(document, "cluster");
  warn_unknown_keys(document, {"format", "version", "base", "name", "nodes", "gpu", "node", "inter_node"}, "", diagnostics);
  Cluster cluster;
  if (const json* base = member(document, "base")) {
    cluster = cluster_from_preset(as_string(*base, "base"));
  } else {
    for (const char* required : {"gpu", "node", "inter_node"}) {
      if (!member(document, required)) throw InputError(required, "missing (or give \"base\": a preset to start from)");
    }
  }
  if (const json* v = member(document, "name")) cluster.name = as_string(*v, "name");
  if (const json* v = member(document, "nodes")) cluster.nodes = int(as_int(*v, "nodes", 1, 1 << 20));
  if (const json* v = member(document, "gpu")) read_gpu(*v, cluster.gpu, diagnostics);
  if (const json* v = member(document, "node")) read_node(*v, cluster.node, diagnostics);
  if (const json* v = member(document, "inter_node")) read_link(*v, "inter_node", cluster.inter_node, diagnostics);
  if (cluster.name.empty()) cluster.name = "custom";
  cluster.validate("");
  return cluster;
}

json cluster_to_json(const Cluster& c) {
  return {{"format", "zerolens.cluster"},
          {"version", 1},
          {"name", c.name},
          {"nodes", c.nodes},
          {"gpu", {{"name", c.gpu.name}, {"memory_bytes", c.gpu.memory_bytes}, {"hbm_bandwidth", c.gpu.hbm_bandwidth},
                   {"peak_flops_fp16", c.gpu.peak_flops_fp16}, {"peak_flops_bf16", c.gpu.peak_flops_bf16},
                   {"peak_flops_fp32", c.gpu.peak_flops_fp32}}},
          {"node", {{"gpus_per_node", c.node.gpus_per_node}, {"cpu_memory_bytes", c.node.cpu_memory_bytes},
                    {"cpu_memory_bandwidth", c.node.cpu_memory_bandwidth}, {"cpu_cores", c.node.cpu_cores},
                    {"nvme_capacity_bytes", c.node.nvme_capacity_bytes}, {"nvme_read_bandwidth", c.node.nvme_read_bandwidth},
                    {"nvme_write_bandwidth", c.node.nvme_write_bandwidth}, {"intra_node", link_json(c.node.intra_node)},
                    {"pcie", link_json(c.node.pcie)}}},
          {"inter_node", link_json(c.inter_node)}};
}

Cluster load_cluster(const std::string& spec, Diagnostics& diagnostics) {
  if (!names_file(spec)) return cluster_from_preset(spec);
  const json document = parse_json_file(spec, "--cluster");
  try {
    return cluster_from_json(document, diagnostics);
  } catch (const InputError& error) {
    throw InputError(spec + ": " + error.where(), std::string(error.what()).substr(error.where().size() + 2));
  }
}

}  // namespace zerolens
