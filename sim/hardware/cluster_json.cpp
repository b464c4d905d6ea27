// Cluster JSON: numbers in base units (bytes, bytes/s, seconds, FLOP/s) or strings with a unit
// ("80 GiB", "300 GB/s", "200 Gb/s", "5 us", "312 TFLOP/s"). A "base" preset may be extended.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "sim/core/json_read.hpp"
#include "sim/hardware/cluster_json.hpp"

namespace zerolens {
namespace {

using nlohmann::json;
using namespace json_read;

enum class Quantity { Bytes, Bandwidth, Seconds, Flops };

const std::map<std::string, double>& unit_scale(Quantity quantity) {
  static const std::map<std::string, double> bytes = {{"B", 1},
                                                      {"KB", 1e3},
                                                      {"MB", 1e6},
                                                      {"GB", 1e9},
                                                      {"TB", 1e12},
                                                      {"PB", 1e15},
                                                      {"KiB", 1024.0},
                                                      {"MiB", 1048576.0},
                                                      {"GiB", 1073741824.0},
                                                      {"TiB", 1099511627776.0}};
  static const std::map<std::string, double> bandwidth = [] {
    std::map<std::string, double> m;
    for (const auto& [unit, scale] : bytes) m[unit + "/s"] = scale;
    for (const auto& [unit, scale] : std::map<std::string, double>{{"Kb/s", 1e3},
                                                                   {"Mb/s", 1e6},
                                                                   {"Gb/s", 1e9},
                                                                   {"Tb/s", 1e12},
                                                                   {"Gbit/s", 1e9},
                                                                   {"Mbit/s", 1e6}}) {
      m[unit] = scale / 8;
    }
    return m;
  }();
  static const std::map<std::string, double> seconds = {
      {"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};
  static const std::map<std::string, double> flops = {
      {"FLOP/s", 1},   {"GFLOP/s", 1e9}, {"TFLOP/s", 1e12}, {"PFLOP/s", 1e15},
      {"GFLOPS", 1e9}, {"TFLOPS", 1e12}, {"PFLOPS", 1e15}};
  switch (quantity) {
    case Quantity::Bytes:
      return bytes;
    case Quantity::Bandwidth:
      return bandwidth;
    case Quantity::Seconds:
      return seconds;
    case Quantity::Flops:
      return flops;
  }
  return bytes;
}

// Rates and latencies a real machine can have: a rate in (0, 1 MB/s) (or 1 MFLOP/s) or a latency
// above 1 s is a typo or a unit slip, and would price a step at infinity (no NaN or inf reaches an
// output).
std::string shortest(double value) {
  std::ostringstream text;
  text << value;  // 1e-300, 2.5
  return text.str();
}

double physical(double value, const std::string& where, Quantity kind) {
  constexpr double kLeastRate = 1e6;
  // 0 says the device has none (no NVMe drive, no bf16 units); the model checks where one is
  // needed.
  if ((kind == Quantity::Bandwidth || kind == Quantity::Flops) && value > 0 && value < kLeastRate) {
    throw InputError(where, std::string("must be at least 1 ") +
                                (kind == Quantity::Flops ? "MFLOP/s" : "MB/s") + ", got " +
                                shortest(value));
  }
  if (kind == Quantity::Seconds && value > 1)
    throw InputError(where, "must be at most 1 s, got " + shortest(value) + " s");
  return value;
}

double quantity(const json& value, const std::string& where, Quantity kind) {
  if (value.is_number()) return physical(as_double(value, where, 0, 1e21), where, kind);
  if (!value.is_string())
    throw InputError(where, "must be a number or a string with a unit, got " + type_phrase(value));
  const std::string text = value.get<std::string>();
  std::size_t used = 0;
  double number = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    throw InputError(where,
                     "expected a number with a unit such as \"80 GiB\", got \"" + text + "\"");
  }
  std::string unit = text.substr(used);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(0, 1);
  const auto& scales = unit_scale(kind);
  const auto it = scales.find(unit);
  if (it == scales.end()) {
    std::vector<std::string> names;
    for (const auto& [name, scale] : scales) names.push_back(name);
    const std::string hint = closest_name(unit, names);
    throw InputError(where, "unknown unit '" + unit + "'" +
                                (hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
  }
  const double result = number * it->second;
  if (!std::isfinite(result) || result < 0 || result > 1e21)
    throw InputError(where, "must be between 0 and 1e21");
  return physical(result, where, kind);
}

Bytes bytes_value(const json& value, const std::string& where) {
  const double bytes = quantity(value, where, Quantity::Bytes);
  if (bytes > 0x1p62) throw InputError(where, "must be at most 2^62 bytes");
  return Bytes(std::llround(bytes));
}

void read_link(const json& block, const std::string& where, LinkSpec& link,
               Diagnostics& diagnostics) {
  as_object(block, where);
  warn_unknown_keys(block, {"name", "bandwidth", "latency"}, where, diagnostics);
  if (const json* v = member(block, "name")) link.name = as_string(*v, join_key(where, "name"));
  if (const json* v = member(block, "bandwidth"))
    link.bandwidth = quantity(*v, join_key(where, "bandwidth"), Quantity::Bandwidth);
  if (const json* v = member(block, "latency"))
    link.latency = quantity(*v, join_key(where, "latency"), Quantity::Seconds);
}

void read_gpu(const json& block, GpuSpec& gpu, Diagnostics& diagnostics) {
  const std::string w = "gpu";
  as_object(block, w);
  warn_unknown_keys(block,
                    {"name", "memory_bytes", "hbm_bandwidth", "peak_flops_fp16", "peak_flops_bf16",
                     "peak_flops_fp32"},
                    w, diagnostics);
  if (const json* v = member(block, "name")) gpu.name = as_string(*v, "gpu.name");
  if (const json* v = member(block, "memory_bytes"))
    gpu.memory_bytes = bytes_value(*v, "gpu.memory_bytes");
  if (const json* v = member(block, "hbm_bandwidth"))
    gpu.hbm_bandwidth = quantity(*v, "gpu.hbm_bandwidth", Quantity::Bandwidth);
  if (const json* v = member(block, "peak_flops_fp16"))
    gpu.peak_flops_fp16 = quantity(*v, "gpu.peak_flops_fp16", Quantity::Flops);
  if (const json* v = member(block, "peak_flops_bf16"))
    gpu.peak_flops_bf16 = quantity(*v, "gpu.peak_flops_bf16", Quantity::Flops);
  if (const json* v = member(block, "peak_flops_fp32"))
    gpu.peak_flops_fp32 = quantity(*v, "gpu.peak_flops_fp32", Quantity::Flops);
}

void read_node(const json& block, NodeSpec& node, Diagnostics& diagnostics) {
  const std::string w = "node";
  as_object(block, w);
  warn_unknown_keys(
      block,
      {"gpus_per_node", "cpu_memory_bytes", "cpu_memory_bandwidth", "cpu_cores",
       "nvme_capacity_bytes", "nvme_read_bandwidth", "nvme_write_bandwidth", "intra_node", "pcie"},
      w, diagnostics);
  if (const json* v = member(block, "gpus_per_node"))
    node.gpus_per_node = int(as_int(*v, "node.gpus_per_node", 1, 1024));
  if (const json* v = member(block, "cpu_memory_bytes"))
    node.cpu_memory_bytes = bytes_value(*v, "node.cpu_memory_bytes");
  if (const json* v = member(block, "cpu_memory_bandwidth")) {
    node.cpu_memory_bandwidth = quantity(*v, "node.cpu_memory_bandwidth", Quantity::Bandwidth);
  }
  if (const json* v = member(block, "cpu_cores"))
    node.cpu_cores = int(as_int(*v, "node.cpu_cores", 1, 1 << 20));
  if (const json* v = member(block, "nvme_capacity_bytes"))
    node.nvme_capacity_bytes = bytes_value(*v, "node.nvme_capacity_bytes");
  if (const json* v = member(block, "nvme_read_bandwidth")) {
    node.nvme_read_bandwidth = quantity(*v, "node.nvme_read_bandwidth", Quantity::Bandwidth);
  }
  if (const json* v = member(block, "nvme_write_bandwidth")) {
    node.nvme_write_bandwidth = quantity(*v, "node.nvme_write_bandwidth", Quantity::Bandwidth);
  }
  if (const json* v = member(block, "intra_node"))
    read_link(*v, "node.intra_node", node.intra_node, diagnostics);
  if (const json* v = member(block, "pcie")) read_link(*v, "node.pcie", node.pcie, diagnostics);
}

// The per-unit costs of a layer kind in one direction.
constexpr const char* kLayerCostKeys[] = {"per_matmul_flop", "per_attention_flop", "per_element"};

void read_layer_cost(const json& block, const std::string& where, LayerCost& cost,
                     Diagnostics& diagnostics) {
  as_object(block, where);
  warn_unknown_keys(block, {std::begin(kLayerCostKeys), std::end(kLayerCostKeys)}, where,
                    diagnostics);
  double* fields[] = {&cost.per_matmul_flop, &cost.per_attention_flop, &cost.per_element};
  for (std::size_t i = 0; i < std::size(fields); ++i) {
    if (const json* v = member(block, kLayerCostKeys[i]))
      *fields[i] = as_double(*v, join_key(where, kLayerCostKeys[i]), 0, 1);
  }
}

struct EngineField {
  const char* key;
  double EngineCosts::*field;
};
constexpr EngineField kEngineFields[] = {
    {"all_reduce_per_byte", &EngineCosts::all_reduce_per_byte},
    {"reduce_scatter_per_byte", &EngineCosts::reduce_scatter_per_byte},
    {"all_gather_per_byte", &EngineCosts::all_gather_per_byte},
    {"all_reduce_fp32_per_byte", &EngineCosts::all_reduce_fp32_per_byte},
    {"reduce_scatter_fp32_per_byte", &EngineCosts::reduce_scatter_fp32_per_byte},
    {"all_gather_fp32_per_byte", &EngineCosts::all_gather_fp32_per_byte},
    {"norm_per_element", &EngineCosts::norm_per_element},
    {"optimizer_per_byte", &EngineCosts::optimizer_per_byte},
    {"mixed_optimizer_per_byte", &EngineCosts::mixed_optimizer_per_byte},
    {"host_optimizer_per_byte", &EngineCosts::host_optimizer_per_byte},
    {"copy_per_byte", &EngineCosts::copy_per_byte}};

LayerKind layer_kind_named(const std::string& name, const std::string& where) {
  std::vector<std::string> names;
  for (int k = 0; k < kLayerKindCount; ++k) {
    if (name == to_string(LayerKind(k))) return LayerKind(k);
    names.push_back(to_string(LayerKind(k)));
  }
  const std::string hint = closest_name(name, names);
  throw InputError(where, "unknown layer kind '" + name + "'" +
                              (hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
}

// calibration.nvme_requests: [{ranks, read_latency, write_latency, tensor_read_latency,
// tensor_write_latency, tensor_read_per_byte, tensor_write_per_byte}] (the per-byte figures absent
// from calibrations before them: 0); a calibration written before it holds one figure for every
// count as nvme_read_latency and nvme_write_latency, read as one rank's.
void read_nvme_requests(const json& block, ClusterCalibration& c, Diagnostics& diagnostics) {
  const json* list = member(block, "nvme_requests");
  if (!list) {
    const json* read = member(block, "nvme_read_latency");
    const json* write = member(block, "nvme_write_latency");
    if (!read && !write) return;
    NvmeRequestCosts costs;
    if (read)
      costs.read_latency = quantity(*read, "calibration.nvme_read_latency", Quantity::Seconds);
    if (write) {
      costs.write_latency = quantity(*write, "calibration.nvme_write_latency", Quantity::Seconds);
    }
    c.nvme_requests.push_back(costs);
    diagnostics.warn("calibration.nvme_read_latency",
                     "an earlier calibration's form: one figure for every count of ranks, read "
                     "as one rank's; a parameter swap's per-tensor requests are priced at their "
                     "bytes alone (run zerolens calibrate --nvme-path again)");
    return;
  }
  if (member(block, "nvme_read_latency") || member(block, "nvme_write_latency")) {
    throw InputError("calibration.nvme_requests",
                     "give either nvme_requests or nvme_read_latency/nvme_write_latency, not both");
  }
  if (!list->is_array())
    throw InputError("calibration.nvme_requests", "must be an array, got " + type_phrase(*list));
  for (std::size_t i = 0; i < list->size(); ++i) {
    const std::string where = "calibration.nvme_requests[" + std::to_string(i) + "]";
    const json& entry = as_object((*list)[i], where);
    warn_unknown_keys(entry,
                      {"ranks", "read_latency", "write_latency", "tensor_read_latency",
                       "tensor_write_latency", "tensor_read_per_byte", "tensor_write_per_byte"},
                      where, diagnostics);
    NvmeRequestCosts costs;
    const json* ranks = member(entry, "ranks");
    if (!ranks) throw InputError(join_key(where, "ranks"), "missing");
    costs.ranks = int(as_int(*ranks, join_key(where, "ranks"), 1, 1 << 20));
    // Every cost is optional (0: not measured), in seconds per request or per byte.
    const std::pair<const char*, double NvmeRequestCosts::*> seconds[] = {
        {"read_latency", &NvmeRequestCosts::read_latency},
        {"write_latency", &NvmeRequestCosts::write_latency},
        {"tensor_read_latency", &NvmeRequestCosts::tensor_read_latency},
        {"tensor_write_latency", &NvmeRequestCosts::tensor_write_latency},
        {"tensor_read_per_byte", &NvmeRequestCosts::tensor_read_per_byte},
        {"tensor_write_per_byte", &NvmeRequestCosts::tensor_write_per_byte}};
    for (const auto& [key, field] : seconds) {
      if (const json* x = member(entry, key))
        costs.*field = quantity(*x, join_key(where, key), Quantity::Seconds);
    }
    for (const NvmeRequestCosts& other : c.nvme_requests) {
      if (other.ranks == costs.ranks)
        throw InputError(join_key(where, "ranks"), std::to_string(costs.ranks) + " given twice");
    }
    c.nvme_requests.push_back(costs);
  }
  std::sort(c.nvme_requests.begin(), c.nvme_requests.end(),
            [](const NvmeRequestCosts& a, const NvmeRequestCosts& b) { return a.ranks < b.ranks; });
}

void read_calibration(const json& block, ClusterCalibration& c, Diagnostics& diagnostics) {
  const std::string w = "calibration";
  as_object(block, w);
  warn_unknown_keys(
      block,
      {"device", "ranks", "threads_per_rank", "collectives", "occupancy", "reference_step_seconds",
       "layers", "engine", "nvme_requests", "nvme_read_latency", "nvme_write_latency"},
      w, diagnostics);
  if (const json* v = member(block, "device")) {
    c.device = as_string(*v, "calibration.device");
    if (c.device != "cpu" && c.device != "cuda")
      throw InputError("calibration.device", "must be \"cpu\" or \"cuda\"");
  }
  if (const json* v = member(block, "ranks"))
    c.ranks = int(as_int(*v, "calibration.ranks", 1, 1 << 20));
  if (const json* v = member(block, "threads_per_rank")) {
    c.threads_per_rank = int(as_int(*v, "calibration.threads_per_rank", 1, 1 << 16));
  }
  read_nvme_requests(block, c, diagnostics);
  if (const json* v = member(block, "collectives")) {
    if (!v->is_array())
      throw InputError("calibration.collectives", "must be an array, got " + type_phrase(*v));
    for (std::size_t i = 0; i < v->size(); ++i) {
      const std::string where = "calibration.collectives[" + std::to_string(i) + "]";
      const json& entry = as_object((*v)[i], where);
      warn_unknown_keys(entry,
                        {"ranks", "latency", "bandwidth", "sixteen_bit_reduce_latency",
                         "sixteen_bit_reduce_bandwidth"},
                        where, diagnostics);
      GroupCollectives group;
      const json* ranks = member(entry, "ranks");
      if (!ranks) throw InputError(join_key(where, "ranks"), "missing");
      group.ranks = int(as_int(*ranks, join_key(where, "ranks"), 2, 1 << 20));
      if (const json* x = member(entry, "latency"))
        group.latency = quantity(*x, join_key(where, "latency"), Quantity::Seconds);
      if (const json* x = member(entry, "bandwidth")) {
        group.bandwidth = quantity(*x, join_key(where, "bandwidth"), Quantity::Bandwidth);
      }
      if (!(group.bandwidth > 0))
        throw InputError(join_key(where, "bandwidth"), "must be positive");
      if (const json* x = member(entry, "sixteen_bit_reduce_latency")) {
        group.sixteen_bit_reduce_latency =
            quantity(*x, join_key(where, "sixteen_bit_reduce_latency"), Quantity::Seconds);
      }
      if (const json* x = member(entry, "sixteen_bit_reduce_bandwidth")) {
        group.sixteen_bit_reduce_bandwidth =
            quantity(*x, join_key(where, "sixteen_bit_reduce_bandwidth"), Quantity::Bandwidth);
        if (!(group.sixteen_bit_reduce_bandwidth > 0))
          throw InputError(join_key(where, "sixteen_bit_reduce_bandwidth"), "must be positive");
      }
      c.collectives.push_back(group);
    }
    std::sort(
        c.collectives.begin(), c.collectives.end(),
        [](const GroupCollectives& a, const GroupCollectives& b) { return a.ranks < b.ranks; });
  }
  if (const json* v = member(block, "reference_step_seconds"))
    c.reference_step_seconds = as_double(*v, "calibration.reference_step_seconds", 0, 1e6);
  if (const json* v = member(block, "occupancy")) {
    if (!v->is_array())
      throw InputError("calibration.occupancy", "must be an array, got " + type_phrase(*v));
    for (std::size_t i = 0; i < v->size(); ++i) {
      const std::string where = "calibration.occupancy[" + std::to_string(i) + "]";
      const json& entry = as_object((*v)[i], where);
      warn_unknown_keys(entry, {"ranks", "factor"}, where, diagnostics);
      Occupancy o;
      if (const json* x = member(entry, "ranks"))
        o.ranks = int(as_int(*x, join_key(where, "ranks"), 1, 1 << 20));
      if (const json* x = member(entry, "factor"))
        o.factor = as_double(*x, join_key(where, "factor"), 0, 1e6);
      if (!(o.factor > 0)) throw InputError(join_key(where, "factor"), "must be positive");
      c.occupancy.push_back(o);
    }
    std::sort(c.occupancy.begin(), c.occupancy.end(),
              [](const Occupancy& a, const Occupancy& b) { return a.ranks < b.ranks; });
  }
  if (const json* v = member(block, "layers")) {
    as_object(*v, "calibration.layers");
    for (const auto& [name, directions] : v->items()) {
      const std::string where = "calibration.layers." + name;
      const LayerKind kind = layer_kind_named(name, where);
      as_object(directions, where);
      warn_unknown_keys(directions, {"forward", "backward"}, where, diagnostics);
      if (const json* d = member(directions, "forward")) {
        read_layer_cost(*d, where + ".forward", c.forward[std::size_t(kind)], diagnostics);
      }
      if (const json* d = member(directions, "backward")) {
        read_layer_cost(*d, where + ".backward", c.backward[std::size_t(kind)], diagnostics);
      }
    }
  }
  if (const json* v = member(block, "engine")) {
    as_object(*v, "calibration.engine");
    std::vector<std::string> keys;
    for (const EngineField& f : kEngineFields) keys.push_back(f.key);
    warn_unknown_keys(*v, keys, "calibration.engine", diagnostics);
    for (const EngineField& f : kEngineFields) {
      if (const json* x = member(*v, f.key))
        c.engine.*f.field = as_double(*x, join_key("calibration.engine", f.key), 0, 1);
    }
  }
}

json calibration_json(const ClusterCalibration& c) {
  json layers = json::object();
  const auto cost_json = [](const LayerCost& cost) {
    return json{{"per_matmul_flop", cost.per_matmul_flop},
                {"per_attention_flop", cost.per_attention_flop},
                {"per_element", cost.per_element}};
  };
  for (int k = 0; k < kLayerKindCount; ++k) {
    const LayerCost& forward = c.forward[std::size_t(k)];
    const LayerCost& backward = c.backward[std::size_t(k)];
    const bool none = forward.per_matmul_flop == 0 && forward.per_attention_flop == 0 &&
                      forward.per_element == 0 && backward.per_matmul_flop == 0 &&
                      backward.per_attention_flop == 0 && backward.per_element == 0;
    if (none) continue;
    layers[to_string(LayerKind(k))] = {{"forward", cost_json(forward)},
                                       {"backward", cost_json(backward)}};
  }
  json engine = json::object();
  for (const EngineField& f : kEngineFields) engine[f.key] = c.engine.*f.field;
  json occupancy = json::array();
  for (const Occupancy& o : c.occupancy)
    occupancy.push_back({{"ranks", o.ranks}, {"factor", o.factor}});
  return {{"device", c.device},
          {"ranks", c.ranks},
          {"threads_per_rank", c.threads_per_rank},
          {"collectives", group_collectives_json(c.collectives)},
          {"occupancy", occupancy},
          {"reference_step_seconds", c.reference_step_seconds},
          {"layers", layers},
          {"engine", engine},
          {"nvme_requests", nvme_requests_json(c.nvme_requests)}};
}

json link_json(const LinkSpec& link) {
  return {{"name", link.name}, {"bandwidth", link.bandwidth}, {"latency", link.latency}};
}

}  // namespace

json group_collectives_json(const std::vector<GroupCollectives>& groups) {
  json collectives = json::array();
  for (const GroupCollectives& g : groups) {
    json group = {{"ranks", g.ranks}, {"latency", g.latency}, {"bandwidth", g.bandwidth}};
    if (g.sixteen_bit_reduce_bandwidth > 0) {
      group["sixteen_bit_reduce_latency"] = g.sixteen_bit_reduce_latency;
      group["sixteen_bit_reduce_bandwidth"] = g.sixteen_bit_reduce_bandwidth;
    }
    collectives.push_back(group);
  }
  return collectives;
}

json nvme_requests_json(const std::vector<NvmeRequestCosts>& requests) {
  json list = json::array();
  for (const NvmeRequestCosts& n : requests) {
    list.push_back({{"ranks", n.ranks},
                    {"read_latency", n.read_latency},
                    {"write_latency", n.write_latency},
                    {"tensor_read_latency", n.tensor_read_latency},
                    {"tensor_write_latency", n.tensor_write_latency},
                    {"tensor_read_per_byte", n.tensor_read_per_byte},
                    {"tensor_write_per_byte", n.tensor_write_per_byte}});
  }
  return list;
}

Cluster cluster_from_json(const json& document, Diagnostics& diagnostics) {
  as_object(document, "cluster");
  warn_unknown_keys(
      document,
      {"format", "version", "base", "name", "nodes", "gpu", "node", "inter_node", "calibration"},
      "", diagnostics);
  // A file of another kind or a newer format is refused, not read by guesswork.
  if (const json* v = member(document, "format");
      v && as_string(*v, "format") != "zerolens.cluster")
    throw InputError("format", "'" + v->get<std::string>() +
                                   "' is not a cluster (expected \"zerolens.cluster\")");
  if (const json* v = member(document, "version"); v && as_int(*v, "version") != 1)
    throw InputError("version", "unsupported cluster format version " + v->dump() +
                                    " (this zerolens reads version 1)");
  Cluster cluster;
  if (const json* base = member(document, "base")) {
    cluster = cluster_from_preset(as_string(*base, "base"));
  } else {
    for (const char* required : {"gpu", "node", "inter_node"}) {
      if (!member(document, required))
        throw InputError(required, "missing (or give \"base\": a preset to start from)");
    }
  }
  if (const json* v = member(document, "name")) cluster.name = as_string(*v, "name");
  if (const json* v = member(document, "nodes"))
    cluster.nodes = int(as_int(*v, "nodes", 1, 1 << 20));
  if (const json* v = member(document, "gpu")) read_gpu(*v, cluster.gpu, diagnostics);
  if (const json* v = member(document, "node")) read_node(*v, cluster.node, diagnostics);
  if (const json* v = member(document, "inter_node"))
    read_link(*v, "inter_node", cluster.inter_node, diagnostics);
  if (const json* v = member(document, "calibration")) {
    cluster.calibration.emplace();
    read_calibration(*v, *cluster.calibration, diagnostics);
  }
  if (cluster.name.empty()) cluster.name = "custom";
  cluster.validate("");
  return cluster;
}

json cluster_to_json(const Cluster& c) {
  json document = {{"format", "zerolens.cluster"},
                   {"version", 1},
                   {"name", c.name},
                   {"nodes", c.nodes},
                   {"gpu",
                    {{"name", c.gpu.name},
                     {"memory_bytes", c.gpu.memory_bytes},
                     {"hbm_bandwidth", c.gpu.hbm_bandwidth},
                     {"peak_flops_fp16", c.gpu.peak_flops_fp16},
                     {"peak_flops_bf16", c.gpu.peak_flops_bf16},
                     {"peak_flops_fp32", c.gpu.peak_flops_fp32}}},
                   {"node",
                    {{"gpus_per_node", c.node.gpus_per_node},
                     {"cpu_memory_bytes", c.node.cpu_memory_bytes},
                     {"cpu_memory_bandwidth", c.node.cpu_memory_bandwidth},
                     {"cpu_cores", c.node.cpu_cores},
                     {"nvme_capacity_bytes", c.node.nvme_capacity_bytes},
                     {"nvme_read_bandwidth", c.node.nvme_read_bandwidth},
                     {"nvme_write_bandwidth", c.node.nvme_write_bandwidth},
                     {"intra_node", link_json(c.node.intra_node)},
                     {"pcie", link_json(c.node.pcie)}}},
                   {"inter_node", link_json(c.inter_node)}};
  if (c.calibration) document["calibration"] = calibration_json(*c.calibration);
  return document;
}

Cluster load_cluster(const std::string& spec, Diagnostics& diagnostics) {
  if (!names_file(spec)) return cluster_from_preset(spec);
  const json document = parse_json_file(spec, "--cluster");
  try {
    return cluster_from_json(document, diagnostics);
  } catch (const InputError& error) {
    throw InputError(spec + ": " + error.where(),
                     std::string(error.what()).substr(error.where().size() + 2));
  }
}

}  // namespace zerolens
