// The `zerolens plan` table and CSV.
#include <string>

#include "cli/reports.hpp"
#include "cli/table.hpp"
#include "sim/model/lora.hpp"

namespace zerolens::cli {
namespace {

std::string yes_no(bool value) { return value ? "yes" : "NO"; }

std::string precision_label(const TrainingConfig& config) {
  return to_string(config.precision.precision);
}

// What PyTorch and nvidia-smi would report for one GPU, each named as they name it.
void print_gpu_figures(std::ostream& out, const Plan& plan, SizeUnit unit) {
  if (plan.request.options.model_states_only) return;
  const GpuMemoryFigures& gpu = plan.gpu;
  auto size = [&](Bytes bytes) { return format_size_value(bytes, unit) + " " + unit_name(unit); };
  const bool simulated = plan.schedule.allocator.kind != AllocatorKind::Flat;
  out << "  GPU/rank: allocated " << size(gpu.allocated) << " (torch.cuda.max_memory_allocated)"
      << " | reserved " << size(gpu.reserved) << " (max_memory_reserved; "
      << (simulated ? std::string(to_string(plan.schedule.allocator.kind)) + " allocator, " +
                          std::to_string(gpu.allocator_segments) + " segments"
                    : "flat allowance")
      << ")\n  device used " << size(gpu.device_used) << " (nvidia-smi: reserved + "
      << size(gpu.outside_allocator) << " CUDA context and library workspaces)"
      << "\n  initialisation " << size(gpu.initialization_allocated) << " allocated";
  if (plan.schedule.context.zero_stage().partitions_parameters()) {
    out << " with the model moved to the GPU whole, "
        << size(gpu.initialization_allocated_partitioned)
        << " built partitioned (zero.Init or a meta-device init)";
  }
  out << "\n";
  if (gpu.allocator_out_of_memory) {
    out << "  the allocator runs out of memory: a request finds no free block and no room for a "
           "segment, "
           "even after returning its cached segments\n";
  }
}

void print_memory(std::ostream& out, const Plan& plan, SizeUnit unit) {
  out << "Memory at the peak of one step (" << unit_name(unit)
      << (unit == SizeUnit::GB ? " = 1e9 bytes" : " = 2^30 bytes")
      << "); GPU per rank, CPU and NVMe per node (" << plan.device(Device::Cpu).ranks_sharing
      << " ranks share a node)\n";
  Table table({"category", "GPU/rank", "CPU/node", "NVMe/node"});
  auto value = [&](Bytes bytes) { return format_size_value(bytes, unit); };
  for (int c = 0; c < kCategoryCount; ++c) {
    std::vector<std::string> row{to_string(Category(c))};
    for (const auto& device : plan.devices) row.push_back(value(device.categories[std::size_t(c)]));
    table.add_row(row);
  }
  table.add_separator();
  auto row_of = [&](const std::string& name, auto&& cell) {
    std::vector<std::string> row{name};
    for (const auto& device : plan.devices) row.push_back(cell(device));
    table.add_row(row);
  };
  row_of("peak total", [&](const DeviceReport& d) { return value(d.peak); });
  row_of("capacity", [&](const DeviceReport& d) { return value(d.capacity); });
  row_of("headroom", [&](const DeviceReport& d) { return value(d.headroom()); });
  row_of("fits", [&](const DeviceReport& d) { return yes_no(d.fits()); });
  table.print(out);
  const auto& gpu = plan.device(Device::Gpu);
  out << "  GPU peak reached: "
      << (gpu.peak_op >= 0 ? plan.schedule.describe(std::size_t(gpu.peak_op), plan.rank_model)
                           : std::string("at initialisation"))
      << "\n";
  print_gpu_figures(out, plan, unit);
}

void print_components(std::ostream& out, const Plan& plan, SizeUnit unit) {
  out << "\nWhere the bytes go at each device's peak (" << unit_name(unit) << ")\n";
  Table table({"component", "category", "GPU/rank", "CPU/node", "NVMe/node"});
  for (int c = 0; c < kComponentCount; ++c) {
    bool any = false;
    for (const auto& device : plan.devices) any = any || device.components[std::size_t(c)] != 0;
    if (!any) continue;
    std::vector<std::string> row{to_string(Component(c)), to_string(category_of(Component(c)))};
    for (const auto& device : plan.devices) row.push_back(format_size_value(device.components[std::size_t(c)], unit));
    table.add_row(row);
  }
  table.print(out);
}

void add_collective_rows(Table& table, const std::array<CollectiveTotals, kOpKindCount>& all,
                         const std::string& group, SizeUnit unit) {
  for (int k = 0; k < kOpKindCount; ++k) {
    const auto& totals = all[std::size_t(k)];
    if (totals.calls == 0) continue;
    table.add_row({to_string(OpKind(k)), group, std::to_string(totals.calls),
                   format_size_value(totals.bytes, unit, 3),
                   format_size_value(totals.traffic_bytes, unit, 3)});
  }
}

// Pipeline parallelism: each stage's layers, parameters and GPU figures (the plan is the worst's).
void print_pipeline_stages(std::ostream& out, const Plan& plan, SizeUnit unit) {
  if (plan.pipeline_stages.empty()) return;
  out << "\nPipeline stages (" << unit_name(unit) << " per GPU; the plan above is stage "
      << plan.pipeline_stage << ")\n";
  Table table({"stage", "layers", "parameters", "allocated peak", "device used"});
  for (std::size_t s = 0; s < plan.pipeline_stages.size(); ++s) {
    const PipelineStagePlan& stage = plan.pipeline_stages[s];
    const auto& layers = stage.model.layers;
    const std::string span =
        layers.empty() ? "-" : layers.front().name + " .. " + layers.back().name;
    table.add_row({std::to_string(s), span, format_count(double(stage.model.parameter_count())),
                   format_size_value(stage.gpu_allocated, unit, 2),
                   format_size_value(stage.gpu_device_used, unit, 2)});
  }
  table.print(out);
}

void print_comm(std::ostream& out, const Plan& plan, SizeUnit unit) {
  out << "\nCommunication per rank per step (" << unit_name(unit)
      << "; traffic = bytes sent by a rank)\n";
  Table table({"collective", "group", "calls", "message bytes", "traffic"});
  const int shard = plan.schedule.context.shard_size();
  const std::string dp = "dp " + std::to_string(plan.request.dp_size);
  add_collective_rows(
      table, plan.comm.collectives,
      shard < plan.request.dp_size ? "shard " + std::to_string(shard) + " of " + dp : dp, unit);
  add_collective_rows(table, plan.comm.replicate,
                      "replicate " + std::to_string(plan.schedule.context.replicas()), unit);
  add_collective_rows(table, plan.comm.tensor_parallel,
                      "tp " + std::to_string(plan.request.config.tensor_parallel.size), unit);
  add_collective_rows(table, plan.comm.pipeline, "pp", unit);
  const ScheduleContext& context = plan.schedule.context;
  add_collective_rows(table, plan.comm.secondary, "hpz " + std::to_string(context.hpz_group), unit);
  const int node = context.data_parallel_ranks_per_node();
  add_collective_rows(table, plan.comm.node_local, "node " + std::to_string(node), unit);
  add_collective_rows(table, plan.comm.cross_node,
                      "cross-node " + std::to_string(context.dp_size / node), unit);
  add_collective_rows(table, plan.comm.expert_parallel,
                      "ep " + std::to_string(context.expert_parallel), unit);
  add_collective_rows(table, plan.comm.expert_data,
                      "expert-dp " + std::to_string(context.expert_data_parallel()), unit);
  table.print(out);
  const auto& links = plan.comm.links;
  const auto& cluster = plan.request.cluster;
  Table link_table({"link", "bytes per rank"});
  link_table.add_row({"intra-node (" + cluster.node.intra_node.name + ")", format_size_value(links.intra_node, unit, 3)});
  link_table.add_row({"inter-node (" + cluster.inter_node.name + ")", format_size_value(links.inter_node, unit, 3)});
  link_table.add_row({"PCIe host-to-device", format_size_value(links.pcie_h2d, unit, 3)});
  link_table.add_row({"PCIe device-to-host", format_size_value(links.pcie_d2h, unit, 3)});
  link_table.add_row({"NVMe read", format_size_value(links.nvme_read, unit, 3)});
  link_table.add_row({"NVMe write", format_size_value(links.nvme_write, unit, 3)});
  out << '\n';
  link_table.print(out);
}

}  // namespace

std::string describe_setup(const Plan& plan) {
  const auto& r = plan.request;
  const auto& cluster = r.cluster;
  const auto& tp = r.config.tensor_parallel;
  const std::int64_t gpus = std::int64_t(r.dp_size) * tp.size * r.config.pipeline.size;
  std::string text = r.model.name + " (" + format_count(double(r.model.parameter_count())) +
                     " parameters) on " + cluster.name + ": " + std::to_string(gpus) + " x " +
                     cluster.gpu.name + " (" + std::to_string(cluster.nodes) + " node" +
                     (cluster.nodes > 1 ? "s" : "") + " x " +
                     std::to_string(cluster.node.gpus_per_node) + ")\n";
  const auto& pp = r.config.pipeline;
  const Elements active = r.model.active_parameter_count();
  if (active < r.model.parameter_count())
    text +=
        "mixture of experts: " + format_count(double(active)) + " parameters active per token\n";
  const auto& ep = r.config.expert_parallel;
  if (ep.active() && !tp.active() && !pp.active()) {
    text += "data parallel " + std::to_string(r.dp_size) + " with expert parallel " +
            std::to_string(ep.size) + ": each rank holds " +
            format_count(double(plan.rank_model.parameter_count())) + " parameters\n";
  }
  if (tp.active() || pp.active()) {
    std::string split;
    if (tp.active()) {
      split += "tensor parallel " + std::to_string(tp.size) +
               (tp.sequence_parallel ? " with sequence parallelism" : "") + " x ";
    }
    if (pp.active()) {
      split +=
          "pipeline " + std::to_string(pp.size) + " stages (" + to_string(pp.schedule) +
          (pp.virtual_stages > 1 ? ", " + std::to_string(pp.virtual_stages) + " chunks each" : "") +
          ") x ";
    }
    text += split + "data parallel " + std::to_string(r.dp_size) +
            (ep.active() ? " with expert parallel " + std::to_string(ep.size) : "") + ": " +
            (pp.active()
                 ? "stage " + std::to_string(plan.pipeline_stage) + " (the most GPU memory) holds "
                 : "each rank holds ") +
            format_count(double(plan.rank_model.parameter_count())) + " parameters\n";
  }
  if (r.config.is_colossalai()) {
    const ColossalAiConfig& c = r.config.colossalai;
    text += std::string("ColossalAI ShardedModelV2 (") + to_string(c.shard_strategy) +
            ", tensor_placement_policy " + to_string(c.placement) +
            (c.reuse_fp16_shard ? ", reuse_fp16_shard" : "") + "; as " +
            r.config.effective_zero().description() + "), ";
  } else if (r.config.is_fsdp()) {
    text += std::string("PyTorch ") + to_string(r.config.framework) +
            (r.config.fsdp.reshard_after_forward ? " FULL_SHARD" : " SHARD_GRAD_OP") +
            (r.config.fsdp.reduce_dtype
                 ? std::string(", reduce in ") + to_string(*r.config.fsdp.reduce_dtype)
                 : "") +
            " (as " + r.config.zero.description() + "), ";
  } else {
    text += r.config.zero.description() + ", ";
  }
  text +=
      precision_label(r.config) + ", " + to_string(r.config.optimizer.type) + "; micro-batch " +
      std::to_string(plan.batch.micro_batch_per_gpu) + " x seq " + std::to_string(plan.seq_len) +
      (plan.schedule.context.target_seq_len > 0
           ? " (target " + std::to_string(plan.schedule.context.target_seq_len) + ")"
           : "") +
      ", gradient accumulation " + std::to_string(plan.batch.gradient_accumulation_steps) +
      ", global batch " + std::to_string(plan.batch.train_batch_size) +
      "; activation checkpointing " + (r.config.activation_checkpointing.enabled ? "on" : "off") +
      (r.options.model_states_only ? "; model states only" : "");
  if (const std::string lora = lora_summary(r.model); !lora.empty()) text += "\n" + lora;
  return text;
}

void print_plan(std::ostream& out, const Plan& plan, SizeUnit unit, bool show_components) {
  out << "zerolens plan: " << describe_setup(plan) << "\n\n";
  print_memory(out, plan, unit);
  if (show_components) print_components(out, plan, unit);
  print_pipeline_stages(out, plan, unit);
  print_comm(out, plan, unit);
  for (const auto& note : plan.notes) out << "note: " << note << '\n';
  out << (plan.fits() ? "\nVerdict: fits.\n" : "\nVerdict: does NOT fit.\n");
}

void print_plan_csv(std::ostream& out, const Plan& plan) {
  out << "section,item,key,value\n";
  for (const auto& device : plan.devices) {
    const std::string name = to_string(device.device);
    for (int c = 0; c < kCategoryCount; ++c) {
      out << "memory," << name << ',' << to_string(Category(c)) << ',' << device.categories[std::size_t(c)] << '\n';
    }
    out << "memory," << name << ",total," << device.peak << '\n';
    out << "memory," << name << ",capacity," << device.capacity << '\n';
    out << "memory," << name << ",fits," << (device.fits() ? 1 : 0) << '\n';
  }
  const GpuMemoryFigures& gpu = plan.gpu;
  out << "memory,gpu,allocated," << gpu.allocated << '\n';
  out << "memory,gpu,reserved," << gpu.reserved << '\n';
  out << "memory,gpu,device_used," << gpu.device_used << '\n';
  out << "memory,gpu,initialization_allocated," << gpu.initialization_allocated << '\n';
  out << "memory,gpu,initialization_allocated_partitioned,"
      << gpu.initialization_allocated_partitioned << '\n';
  // Data-parallel collectives by kind; ZeRO++'s groups' as "hpz.all_gather", "node.all_to_all".
  const auto collective_rows = [&](const auto& all, const std::string& prefix) {
    for (int k = 0; k < kOpKindCount; ++k) {
      const auto& totals = all[std::size_t(k)];
      if (totals.calls == 0) continue;
      const std::string name = prefix + to_string(OpKind(k));
      out << "collective," << name << ",calls," << totals.calls << '\n';
      out << "collective," << name << ",bytes," << totals.bytes << '\n';
      out << "collective," << name << ",traffic_bytes," << totals.traffic_bytes << '\n';
    }
  };
  collective_rows(plan.comm.collectives, "");
  collective_rows(plan.comm.secondary, "hpz.");
  collective_rows(plan.comm.node_local, "node.");
  collective_rows(plan.comm.cross_node, "cross_node.");
  collective_rows(plan.comm.expert_parallel, "ep.");
  collective_rows(plan.comm.expert_data, "expert_dp.");
  const auto& links = plan.comm.links;
  out << "link,intra_node,bytes," << links.intra_node << '\n'
      << "link,inter_node,bytes," << links.inter_node << '\n'
      << "link,pcie_h2d,bytes," << links.pcie_h2d << '\n'
      << "link,pcie_d2h,bytes," << links.pcie_d2h << '\n'
      << "link,nvme_read,bytes," << links.nvme_read << '\n'
      << "link,nvme_write,bytes," << links.nvme_write << '\n';
}

}  // namespace zerolens::cli
