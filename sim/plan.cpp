#include "sim/plan.hpp"

#include "sim/error.hpp"

namespace zerolens {
namespace {

DeviceReport device_report(Device device, const DevicePeak& peak, const Cluster& cluster,
                           int ranks_per_node) {
  DeviceReport report;
  report.device = device;
  report.peak_per_rank = peak.peak;
  report.peak_op = peak.peak_op;
  report.ranks_sharing = device == Device::Gpu ? 1 : ranks_per_node;
  report.peak = peak.peak * report.ranks_sharing;
  for (int c = 0; c < kCategoryCount; ++c) {
    report.categories[std::size_t(c)] = peak.categories[std::size_t(c)] * report.ranks_sharing;
  }
  for (int c = 0; c < kComponentCount; ++c) {
    report.components[std::size_t(c)] = peak.components[std::size_t(c)] * report.ranks_sharing;
  }
  switch (device) {
    case Device::Gpu: report.capacity = cluster.gpu.memory_bytes; break;
    case Device::Cpu: report.capacity = cluster.node.cpu_memory_bytes; break;
    case Device::Nvme: report.capacity = cluster.node.nvme_capacity_bytes; break;
  }
  return report;
}

void add_notes(Plan& plan) {
  const auto& config = plan.request.config;
  if (config.activation_checkpointing.partition_activations) {
    plan.notes.push_back(
        "activation_checkpointing.partition_activations partitions checkpoints across "
        "model-parallel ranks; with data parallelism only it changes nothing");
  }
  if (config.zero.stage == 3) {
    plan.notes.push_back("stage 3: parameters are gathered per layer; prefetch and release follow "
                         "stage3_prefetch_bucket_size, stage3_max_live_parameters and "
                         "stage3_max_reuse_distance in steady state (after the first step's trace)");
  }
}

}  // namespace

bool Plan::fits() const {
  for (const auto& device : devices) {
    if (!device.fits()) return false;
  }
  return true;
}

Plan make_plan(PlanRequest request) {
  request.config.validate();
  if (request.dp_size < 1) throw InputError("gpus", "the data-parallel size must be at least 1");
  Plan plan;
  plan.seq_len = request.config.seq_len.value_or(request.model.default_seq_len);
  if (plan.seq_len < 1) throw InputError("seq_len", "must be positive");
  plan.batch = resolve_batch(request.config.batch, request.dp_size);
  const int gpus_per_node = request.cluster.node.gpus_per_node;
  plan.schedule = build_schedule(request.model, request.config, plan.batch, plan.seq_len,
                                 request.dp_size, gpus_per_node, request.options);
  const MemoryTimeline memory = replay_memory(plan.schedule, false);
  const int ranks_per_node = group_shape(request.dp_size, gpus_per_node).ranks_per_node;
  for (int d = 0; d < kDeviceCount; ++d) {
    plan.devices[std::size_t(d)] =
        device_report(Device(d), memory.devices[std::size_t(d)], request.cluster, ranks_per_node);
  }
  plan.comm = summarize_comm(plan.schedule);
  plan.request = std::move(request);
  add_notes(plan);
  return plan;
}

}  // namespace zerolens
