#include "sim/report/plan_json.hpp"

#include "sim/config/deepspeed_json.hpp"
#include "sim/core/error.hpp"
#include "sim/hardware/cluster_json.hpp"
#include "sim/model/lora.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens {
namespace {

using nlohmann::json;

json category_json(const CategoryBytes& categories, Bytes total) {
  json bytes = json::object();
  for (int c = 0; c < kCategoryCount; ++c) bytes[to_string(Category(c))] = categories[std::size_t(c)];
  bytes["total"] = total;
  return bytes;
}

json component_json(const ComponentBytes& components) {
  json bytes = json::object();
  for (int c = 0; c < kComponentCount; ++c) {
    if (components[std::size_t(c)] != 0) bytes[to_string(Component(c))] = components[std::size_t(c)];
  }
  return bytes;
}

// The three figures a user reads off a GPU, named as PyTorch and nvidia-smi name them.
json gpu_memory_json(const Plan& plan) {
  const GpuMemoryFigures& gpu = plan.gpu;
  return {{"allocated", gpu.allocated},
          {"reserved", gpu.reserved},
          {"outside_allocator", gpu.outside_allocator},
          {"device_used", gpu.device_used},
          {"initialization_allocated", gpu.initialization_allocated},
          {"initialization_allocated_partitioned", gpu.initialization_allocated_partitioned},
          {"allocator", to_string(plan.schedule.allocator.kind)},
          {"allocator_segments", gpu.allocator_segments},
          {"allocator_out_of_memory", gpu.allocator_out_of_memory}};
}

json device_json(const Plan& plan, const DeviceReport& device) {
  json out;
  out["scope"] = device.device == Device::Gpu ? "rank" : "node";
  out["ranks_sharing"] = device.ranks_sharing;
  out["capacity"] = device.capacity;
  out["peak_per_rank"] = device.peak_per_rank;
  out["headroom"] = device.headroom();
  out["fits"] = device.fits();
  out["bytes"] = category_json(device.categories, device.peak);
  out["components"] = component_json(device.components);
  out["peak_op"] = device.peak_op;
  if (device.device == Device::Gpu) out["memory"] = gpu_memory_json(plan);
  out["peak_during"] = device.peak_op >= 0
                           ? plan.schedule.describe(std::size_t(device.peak_op), plan.rank_model)
                           : std::string("initialisation (before the step)");
  return out;
}

json collectives_json(const std::array<CollectiveTotals, kOpKindCount>& all, bool list_every_kind) {
  json collectives = json::object();
  for (int k = 0; k < kOpKindCount; ++k) {
    const auto& totals = all[std::size_t(k)];
    if (totals.calls == 0 && !(list_every_kind && is_collective(OpKind(k)))) continue;
    collectives[to_string(OpKind(k))] = {
        {"calls", totals.calls}, {"bytes", totals.bytes}, {"traffic_bytes", totals.traffic_bytes}};
  }
  return collectives;
}

json comm_json(const Plan& plan) {
  // The data-parallel collectives are always listed; the tensor-parallel group's when it has any.
  const json collectives = collectives_json(plan.comm.collectives, true);
  const auto& cluster = plan.request.cluster;
  const auto& links = plan.comm.links;
  json link_json = {
      {"intra_node", {{"name", cluster.node.intra_node.name}, {"bytes", links.intra_node}}},
      {"inter_node", {{"name", cluster.inter_node.name}, {"bytes", links.inter_node}}},
      {"pcie_h2d", {{"name", cluster.node.pcie.name}, {"bytes", links.pcie_h2d}}},
      {"pcie_d2h", {{"name", cluster.node.pcie.name}, {"bytes", links.pcie_d2h}}},
      {"nvme_read", {{"name", "NVMe"}, {"bytes", links.nvme_read}}},
      {"nvme_write", {{"name", "NVMe"}, {"bytes", links.nvme_write}}},
  };
  json out = {
      {"scope", "rank, one training step"}, {"collectives", collectives}, {"links", link_json}};
  if (plan.request.config.tensor_parallel.active()) {
    out["tensor_parallel_collectives"] = collectives_json(plan.comm.tensor_parallel, false);
  }
  if (plan.request.config.pipeline.active()) {
    out["pipeline_collectives"] = collectives_json(plan.comm.pipeline, false);
  }
  if (plan.schedule.context.replicas() > 1) {
    out["replicate_collectives"] = collectives_json(plan.comm.replicate, false);
  }
  const ScheduleContext& context = plan.schedule.context;
  if (context.hpz_group > 0) out["hpz_collectives"] = collectives_json(plan.comm.secondary, false);
  if (context.quantized_gradients) {
    out["node_collectives"] = collectives_json(plan.comm.node_local, false);
    out["cross_node_collectives"] = collectives_json(plan.comm.cross_node, false);
  }
  if (context.expert_parallel > 1) {
    out["expert_parallel_collectives"] = collectives_json(plan.comm.expert_parallel, false);
    out["expert_data_collectives"] = collectives_json(plan.comm.expert_data, false);
  }
  return out;
}

json pipeline_json(const Plan& plan) {
  const auto& pipeline = plan.request.config.pipeline;
  json stages = json::array();
  for (std::size_t s = 0; s < plan.pipeline_stages.size(); ++s) {
    const auto& stage = plan.pipeline_stages[s];
    json layers = json::array();
    for (const auto& layer : stage.model.layers) layers.push_back(layer.name);
    stages.push_back({{"stage", s},
                      {"layers", layers},
                      {"parameters", stage.model.parameter_count()},
                      {"gpu_allocated_peak_bytes", stage.gpu_allocated},
                      {"gpu_device_used_bytes", stage.gpu_device_used}});
  }
  return {{"stages", pipeline.size},
          {"virtual_stages", pipeline.virtual_stages},
          {"schedule", to_string(pipeline.schedule)},
          {"micro_batches", plan.batch.gradient_accumulation_steps},
          {"planned_stage", plan.pipeline_stage},
          {"per_stage", stages}};
}

// A mixture-of-experts model's routing as the plan runs it: the first MoE layer's (every MoE
// layer routes alike), and the expert parameters a rank holds.
json moe_json(const Plan& plan) {
  const Layer* moe_layer = nullptr;
  for (const Layer& layer : plan.rank_model.layers) {
    if (layer.moe) {
      moe_layer = &layer;
      break;
    }
  }
  if (!moe_layer) return nullptr;
  const MoeRouting& r = *moe_layer->moe;
  const std::int64_t tokens = plan.batch.micro_batch_per_gpu * plan.seq_len;
  const ScheduleContext& c = plan.schedule.context;
  json out = {{"experts", r.experts},
              {"top_k", r.top_k},
              {"experts_per_rank", r.local_experts},
              {"expert_parallel", c.expert_parallel},
              {"expert_data_parallel", c.expert_data_parallel()},
              {"expert_parameters_per_rank", plan.rank_model.expert_parameter_count()},
              {"expert_rows_per_micro_step", r.rows(tokens)}};
  if (r.exchanges()) {
    out["capacity_factor"] = r.capacity_factor;
    out["min_capacity"] = r.min_capacity;
    out["capacity"] = r.capacity(tokens);
    out["exchange_bytes"] =
        r.exchange_elements(tokens) * plan.request.config.precision.param_bytes();
  }
  return out;
}

json run_json(const Plan& plan) {
  const auto& options = plan.request.options;
  json run = {{"framework", to_string(plan.request.config.framework)},
              {"dp_size", plan.request.dp_size},
              {"tensor_parallel", plan.request.config.tensor_parallel.size},
              {"sequence_parallel", plan.request.config.tensor_parallel.sequence_parallel},
              {"pipeline_parallel", plan.request.config.pipeline.size},
              {"expert_parallel", plan.request.config.expert_parallel.size},
              {"gpus_per_node", plan.request.cluster.node.gpus_per_node},
              {"nodes", plan.request.cluster.nodes},
              {"seq_len", plan.seq_len},
              {"micro_batch_per_gpu", plan.batch.micro_batch_per_gpu},
              {"gradient_accumulation_steps", plan.batch.gradient_accumulation_steps},
              {"train_batch_size", plan.batch.train_batch_size},
              {"model_states_only", options.model_states_only},
              {"cuda_context_bytes", options.cuda_context_bytes},
              {"library_workspace_bytes", options.library_workspace_bytes},
              {"allocator", to_string(options.allocator.kind)},
              {"fragmentation_fraction", options.allocator.fragmentation_fraction}};
  if (plan.schedule.context.target_seq_len > 0)
    run["target_seq_len"] = plan.schedule.context.target_seq_len;
  return run;
}

Bytes integer_at(const json& object, const std::string& key, const std::string& where) {
  if (!object.is_object() || !object.contains(key) || !object.at(key).is_number_integer()) {
    throw InputError(where + "." + key, "missing or not an integer");
  }
  return object.at(key).get<Bytes>();
}

const json& object_at(const json& object, const std::string& key, const std::string& where) {
  if (!object.is_object() || !object.contains(key) || !object.at(key).is_object()) {
    throw InputError(where.empty() ? key : where + "." + key, "missing or not an object");
  }
  return object.at(key);
}

// The adapters as planned: the modules PEFT's targets resolve to, and the base's storage.
json lora_json(const TransformerShape& shape) {
  return {{"rank", shape.lora.rank},
          {"modules", lora_adapted_modules(shape)},
          {"base_format", to_string(shape.lora.base_format)},
          {"dropout", shape.lora.dropout}};
}

}  // namespace

json plan_to_json(const Plan& plan) {
  const Model& model = plan.request.model;
  json out;
  out["schema"] = "zerolens.plan";
  out["version"] = kPlanJsonVersion;
  out["units"] = {{"bytes", "bytes"}, {"traffic", "bytes per rank per step"}};
  out["model"] = {{"name", model.name},
                  {"source", model.source},
                  {"parameter_count", model.parameter_count()},
                  {"parameters_per_rank", plan.rank_model.parameter_count()},
                  {"active_parameter_count", model.active_parameter_count()},
                  {"trainable_parameter_count", model.trainable_parameter_count()},
                  {"layers", model.layers.size()}};
  if (const json moe = moe_json(plan); !moe.is_null()) out["moe"] = moe;
  if (model.shape && model.shape->lora.active()) out["model"]["lora"] = lora_json(*model.shape);
  out["config"] = to_deepspeed_json(plan.request.config);
  out["run"] = run_json(plan);
  out["cluster"] = cluster_to_json(plan.request.cluster);
  json devices = json::object();
  for (const auto& device : plan.devices) devices[to_string(device.device)] = device_json(plan, device);
  out["devices"] = devices;
  out["comm"] = comm_json(plan);
  if (!plan.pipeline_stages.empty()) out["pipeline"] = pipeline_json(plan);
  out["fits"] = plan.fits();
  out["notes"] = plan.notes;
  return out;
}

json compare_to_json(const VariantComparison& comparison) {
  json rows = json::array();
  for (const auto& [variant, plan] : comparison.plans) {
    rows.push_back({{"variant", variant.label}, {"plan", plan_to_json(plan)}});
  }
  json left_out = json::array();
  for (const auto& [variant, reason] : comparison.left_out)
    left_out.push_back({{"variant", variant.label}, {"reason", reason}});
  return {{"schema", "zerolens.compare"},
          {"version", kPlanJsonVersion},
          {"variants", rows},
          {"left_out", left_out}};
}

PlanFigures plan_figures(const Plan& plan) {
  PlanFigures figures;
  for (int d = 0; d < kDeviceCount; ++d) {
    const auto& device = plan.devices[std::size_t(d)];
    figures.categories[std::size_t(d)] = device.categories;
    figures.totals[std::size_t(d)] = device.peak;
    figures.capacities[std::size_t(d)] = device.capacity;
  }
  figures.collectives = plan.comm.collectives;
  figures.links = plan.comm.links;
  figures.fits = plan.fits();
  return figures;
}

PlanFigures plan_figures_from_json(const json& document) {
  if (!document.is_object() || document.value("schema", "") != "zerolens.plan") {
    throw InputError("schema", "not a zerolens plan (expected \"schema\": \"zerolens.plan\")");
  }
  if (document.value("version", -1) != kPlanJsonVersion) {
    throw InputError("version", "unsupported plan version (this build reads version " +
                                    std::to_string(kPlanJsonVersion) + ")");
  }
  PlanFigures figures;
  const json& devices = object_at(document, "devices", "");
  for (int d = 0; d < kDeviceCount; ++d) {
    const std::string where = std::string("devices.") + to_string(Device(d));
    const json& device = object_at(devices, to_string(Device(d)), "devices");
    const json& bytes = object_at(device, "bytes", where);
    for (int c = 0; c < kCategoryCount; ++c) {
      figures.categories[std::size_t(d)][std::size_t(c)] =
          integer_at(bytes, to_string(Category(c)), where + ".bytes");
    }
    figures.totals[std::size_t(d)] = integer_at(bytes, "total", where + ".bytes");
    figures.capacities[std::size_t(d)] = integer_at(device, "capacity", where);
  }
  const json& comm = object_at(document, "comm", "");
  const json& collectives = object_at(comm, "collectives", "comm");
  for (int k = 0; k < kOpKindCount; ++k) {
    const std::string name = to_string(OpKind(k));
    if (!collectives.contains(name)) continue;
    const std::string where = "comm.collectives." + name;
    auto& totals = figures.collectives[std::size_t(k)];
    totals.calls = integer_at(collectives.at(name), "calls", where);
    totals.bytes = integer_at(collectives.at(name), "bytes", where);
    totals.traffic_bytes = integer_at(collectives.at(name), "traffic_bytes", where);
  }
  const json& links = object_at(comm, "links", "comm");
  auto link = [&](const char* key) { return integer_at(object_at(links, key, "comm.links"), "bytes", std::string("comm.links.") + key); };
  figures.links = {link("intra_node"), link("inter_node"), link("pcie_h2d"),
                   link("pcie_d2h"),   link("nvme_read"),  link("nvme_write")};
  if (!document.contains("fits") || !document.at("fits").is_boolean()) {
    throw InputError("fits", "missing or not a boolean");
  }
  figures.fits = document.at("fits").get<bool>();
  return figures;
}

}  // namespace zerolens
