#include "sim/trace/trace_counts.hpp"

#include <nlohmann/json.hpp>

#include "sim/core/json_read.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens {
namespace {

using nlohmann::json;
using namespace json_read;

constexpr const char* kLinkNames[] = {"pcie_h2d", "pcie_d2h", "nvme_read", "nvme_write"};

Bytes* link_field(TraceLinkBytes& links, int i) {
  Bytes* fields[] = {&links.pcie_h2d, &links.pcie_d2h, &links.nvme_read, &links.nvme_write};
  return fields[i];
}

const json& required(const json& object, const std::string& key, const std::string& where) {
  const json* value = member(object, key);
  if (!value) throw InputError(join_key(where, key), "missing");
  return *value;
}

json category_highs_json(const std::array<CategoryBytes, kDeviceCount>& highs) {
  json devices = json::object();
  for (int d = 0; d < kDeviceCount; ++d) {
    json categories = json::object();
    for (int c = 0; c < kCategoryCount; ++c) categories[to_string(Category(c))] = highs[std::size_t(d)][std::size_t(c)];
    devices[to_string(Device(d))] = categories;
  }
  return devices;
}

std::array<CategoryBytes, kDeviceCount> read_category_highs(const json& object, const std::string& where) {
  as_object(object, where);
  std::array<CategoryBytes, kDeviceCount> highs{};
  for (int d = 0; d < kDeviceCount; ++d) {
    const std::string device = join_key(where, to_string(Device(d)));
    const json& categories = as_object(required(object, to_string(Device(d)), where), device);
    for (int c = 0; c < kCategoryCount; ++c) {
      const char* name = to_string(Category(c));
      highs[std::size_t(d)][std::size_t(c)] = as_int(required(categories, name, device), join_key(device, name));
    }
  }
  return highs;
}

json collectives_json(const std::array<TraceCollective, kOpKindCount>& collectives) {
  json kinds = json::object();
  for (int k = 0; k < kOpKindCount; ++k) {
    const TraceCollective& c = collectives[std::size_t(k)];
    if (c.calls != 0 || c.bytes != 0) kinds[to_string(OpKind(k))] = {{"calls", c.calls}, {"bytes", c.bytes}};
  }
  return kinds;
}

// A collective kind, or with `point_to_point` also send and recv (the pipeline's counts).
OpKind collective_kind(const std::string& name, const std::string& where, bool point_to_point) {
  for (int k = 0; k < kOpKindCount; ++k) {
    const OpKind kind = OpKind(k);
    const bool counted =
        is_collective(kind) || (point_to_point && (kind == OpKind::Send || kind == OpKind::Recv));
    if (counted && name == to_string(kind)) return kind;
  }
  throw InputError(where, std::string("not a collective kind (all_gather, reduce_scatter, "
                                      "all_reduce, broadcast, overflow_check, grad_norm") +
                              (point_to_point ? ", send, recv)" : ")"));
}

std::array<TraceCollective, kOpKindCount> read_collectives(const json& object,
                                                           const std::string& where,
                                                           bool point_to_point = false) {
  as_object(object, where);
  std::array<TraceCollective, kOpKindCount> collectives{};
  for (const auto& [name, value] : object.items()) {
    const std::string key = join_key(where, name);
    TraceCollective& c = collectives[std::size_t(collective_kind(name, key, point_to_point))];
    as_object(value, key);
    c.calls = as_int(required(value, "calls", key), join_key(key, "calls"));
    c.bytes = as_int(required(value, "bytes", key), join_key(key, "bytes"));
  }
  return collectives;
}

json link_bytes_json(TraceLinkBytes links) {
  json object = json::object();
  for (int i = 0; i < 4; ++i) object[kLinkNames[i]] = *link_field(links, i);
  return object;
}

TraceLinkBytes read_link_bytes(const json& object, const std::string& where) {
  as_object(object, where);
  TraceLinkBytes links;
  for (int i = 0; i < 4; ++i) {
    *link_field(links, i) = as_int(required(object, kLinkNames[i], where), join_key(where, kLinkNames[i]));
  }
  return links;
}

constexpr const char* kGpuMemoryNames[] = {"allocated",
                                           "reserved",
                                           "outside_allocator",
                                           "device_used",
                                           "initialization_allocated",
                                           "initialization_allocated_partitioned"};

Bytes* gpu_memory_field(GpuMemoryFigures& gpu, int i) {
  Bytes* fields[] = {&gpu.allocated,
                     &gpu.reserved,
                     &gpu.outside_allocator,
                     &gpu.device_used,
                     &gpu.initialization_allocated,
                     &gpu.initialization_allocated_partitioned};
  return fields[i];
}

json gpu_memory_json(GpuMemoryFigures gpu) {
  json object = json::object();
  for (int i = 0; i < 6; ++i) object[kGpuMemoryNames[i]] = *gpu_memory_field(gpu, i);
  object["allocator_out_of_memory"] = gpu.allocator_out_of_memory;
  return object;
}

GpuMemoryFigures read_gpu_memory(const json& object, const std::string& where) {
  as_object(object, where);
  GpuMemoryFigures gpu;
  for (int i = 0; i < 6; ++i) {
    *gpu_memory_field(gpu, i) =
        as_int(required(object, kGpuMemoryNames[i], where), join_key(where, kGpuMemoryNames[i]));
  }
  const std::string oom = "allocator_out_of_memory";
  gpu.allocator_out_of_memory = as_bool(required(object, oom, where), join_key(where, oom));
  return gpu;
}

}  // namespace

void write_summary_counts(const TraceSummary& summary, json& object) {
  if (summary.category_highs) object["category_highs"] = category_highs_json(*summary.category_highs);
  if (summary.collectives) object["collectives"] = collectives_json(*summary.collectives);
  if (summary.tensor_parallel_collectives)
    object["tensor_parallel_collectives"] = collectives_json(*summary.tensor_parallel_collectives);
  if (summary.pipeline_collectives)
    object["pipeline_collectives"] = collectives_json(*summary.pipeline_collectives);
  if (summary.replicate_collectives)
    object["replicate_collectives"] = collectives_json(*summary.replicate_collectives);
  if (summary.hpz_collectives)
    object["hpz_collectives"] = collectives_json(*summary.hpz_collectives);
  if (summary.node_collectives)
    object["node_collectives"] = collectives_json(*summary.node_collectives);
  if (summary.cross_node_collectives)
    object["cross_node_collectives"] = collectives_json(*summary.cross_node_collectives);
  if (summary.expert_parallel_collectives)
    object["expert_parallel_collectives"] = collectives_json(*summary.expert_parallel_collectives);
  if (summary.expert_data_collectives)
    object["expert_data_collectives"] = collectives_json(*summary.expert_data_collectives);
  if (summary.link_bytes) object["link_bytes"] = link_bytes_json(*summary.link_bytes);
  if (summary.gpu_memory) object["gpu_memory"] = gpu_memory_json(*summary.gpu_memory);
}

void read_summary_counts(const json& object, TraceSummary& summary) {
  if (const json* highs = member(object, "category_highs")) {
    summary.category_highs = read_category_highs(*highs, "summary.category_highs");
  }
  if (const json* collectives = member(object, "collectives")) {
    summary.collectives = read_collectives(*collectives, "summary.collectives");
  }
  if (const json* tp = member(object, "tensor_parallel_collectives")) {
    summary.tensor_parallel_collectives =
        read_collectives(*tp, "summary.tensor_parallel_collectives");
  }
  if (const json* pp = member(object, "pipeline_collectives"))
    summary.pipeline_collectives = read_collectives(*pp, "summary.pipeline_collectives", true);
  if (const json* replicate = member(object, "replicate_collectives"))
    summary.replicate_collectives = read_collectives(*replicate, "summary.replicate_collectives");
  if (const json* hpz = member(object, "hpz_collectives"))
    summary.hpz_collectives = read_collectives(*hpz, "summary.hpz_collectives");
  if (const json* node = member(object, "node_collectives"))
    summary.node_collectives = read_collectives(*node, "summary.node_collectives");
  if (const json* cross = member(object, "cross_node_collectives"))
    summary.cross_node_collectives = read_collectives(*cross, "summary.cross_node_collectives");
  if (const json* ep = member(object, "expert_parallel_collectives")) {
    summary.expert_parallel_collectives =
        read_collectives(*ep, "summary.expert_parallel_collectives");
  }
  if (const json* experts = member(object, "expert_data_collectives"))
    summary.expert_data_collectives = read_collectives(*experts, "summary.expert_data_collectives");
  if (const json* links = member(object, "link_bytes")) {
    summary.link_bytes = read_link_bytes(*links, "summary.link_bytes");
  }
  if (const json* gpu = member(object, "gpu_memory"))
    summary.gpu_memory = read_gpu_memory(*gpu, "summary.gpu_memory");
}

}  // namespace zerolens
