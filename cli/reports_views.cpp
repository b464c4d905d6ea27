// Tables of the planning views: --compare, --max-model, --deepspeed-estimate.
#include <string>

#include "cli/reports.hpp"
#include "cli/table.hpp"

namespace zerolens::cli {
namespace {

std::string size(Bytes bytes, SizeUnit unit) { return format_size_value(bytes, unit); }

Bytes network_traffic(const Plan& plan) { return plan.comm.links.intra_node + plan.comm.links.inter_node; }
Bytes pcie_traffic(const Plan& plan) { return plan.comm.links.pcie_h2d + plan.comm.links.pcie_d2h; }
Bytes nvme_traffic(const Plan& plan) { return plan.comm.links.nvme_read + plan.comm.links.nvme_write; }

Plan plan_for(const PlanRequest& base, const Variant& variant, bool model_states_only) {
  PlanRequest request = base;
  request.config = apply_variant(base.config, variant);
  request.options.model_states_only = model_states_only;
  return make_plan(std::move(request));
}

}  // namespace

void print_compare(std::ostream& out, const std::vector<VariantPlan>& plans, SizeUnit unit) {
  if (plans.empty()) return;
  out << "zerolens plan --compare: " << describe_setup(plans.front().plan) << "\n";
  out << "(stage and offload vary per row; memory at the peak in " << unit_name(unit)
      << "; traffic per rank per step in " << unit_name(unit) << ")\n\n";
  Table table({"variant", "GPU/rank", "CPU/node", "NVMe/node", "fits", "network", "PCIe", "NVMe I/O"});
  for (const auto& [variant, plan] : plans) {
    table.add_row({variant.label, size(plan.device(Device::Gpu).peak, unit), size(plan.device(Device::Cpu).peak, unit),
                   size(plan.device(Device::Nvme).peak, unit), plan.fits() ? "yes" : "NO",
                   size(network_traffic(plan), unit), size(pcie_traffic(plan), unit), size(nvme_traffic(plan), unit)});
  }
  table.print(out);
  const auto& cluster = plans.front().plan.request.cluster;
  out << "capacity: GPU " << format_bytes(cluster.gpu.memory_bytes, unit) << ", CPU "
      << format_bytes(cluster.node.cpu_memory_bytes, unit) << " per node, NVMe "
      << format_bytes(cluster.node.nvme_capacity_bytes, unit) << " per node\n";
}

void print_compare_csv(std::ostream& out, const std::vector<VariantPlan>& plans) {
  out << "variant,stage,offload_optimizer,offload_param,gpu_peak_bytes,cpu_peak_bytes,nvme_peak_bytes,fits,"
         "network_bytes,pcie_bytes,nvme_io_bytes\n";
  for (const auto& [variant, plan] : plans) {
    out << '"' << variant.label << "\"," << variant.stage << ',' << to_string(variant.offload_optimizer) << ','
        << to_string(variant.offload_param) << ',' << plan.device(Device::Gpu).peak << ','
        << plan.device(Device::Cpu).peak << ',' << plan.device(Device::Nvme).peak << ',' << (plan.fits() ? 1 : 0)
        << ',' << network_traffic(plan) << ',' << pcie_traffic(plan) << ',' << nvme_traffic(plan) << '\n';
  }
}

void print_max_models(std::ostream& out, const std::vector<MaxModel>& results, const PlanRequest& base) {
  out << "zerolens plan --max-model: largest model that fits " << base.dp_size << " x " << base.cluster.gpu.name
      << " (" << base.cluster.name << ")\n\n";
  Table table({"variant", "largest model", "parameters"});
  for (const auto& result : results) {
    table.add_row({result.variant.label, result.found ? result.model_name : "none fits",
                   result.found ? format_count(double(result.parameter_count)) : "-"});
  }
  table.print(out);
}

void print_max_models_csv(std::ostream& out, const std::vector<MaxModel>& results) {
  out << "variant,found,model,parameter_count\n";
  for (const auto& result : results) {
    out << '"' << result.variant.label << "\"," << (result.found ? 1 : 0) << ',' << result.model_name << ','
        << result.parameter_count << '\n';
  }
}

void print_deepspeed_estimates(std::ostream& out, const PlanRequest& base, SizeUnit unit) {
  const Model& model = base.model;
  const int gpus_per_node = base.cluster.node.gpus_per_node;
  const int nodes = base.cluster.nodes;
  out << "DeepSpeed's estimators (estimate_zero2/zero3_model_states_mem_needs, additional_buffer_factor 1.5)\n"
      << "for " << model.name << " (" << model.parameter_count() << " params, largest layer "
      << model.largest_layer_params() << ") on " << nodes << " node(s) x " << gpus_per_node << " GPUs,\n"
      << "next to zerolens: model states only (ZeRO paper accounting) and the full figure "
      << "(activations, buffers, overhead) for the same offload settings. DeepSpeed prints GiB labelled \"GB\".\n\n";
  Table table({"stage / options", "DS CPU GiB", "DS GPU GiB", std::string("zl states GPU ") + unit_name(unit),
               std::string("zl full GPU ") + unit_name(unit), std::string("zl full CPU/node ") + unit_name(unit)});
  for (const int stage : {2, 3}) {
    for (const auto& row : deepspeed_estimate_table(stage, model.parameter_count(), model.largest_layer_params(),
                                                    gpus_per_node, nodes)) {
      const Variant variant{"", stage, row.offload_optimizer, row.offload_param};
      const Plan states = plan_for(base, variant, true);
      const Plan full = plan_for(base, variant, false);
      std::string label = ZeroStage{stage}.name() + " opt:" + to_string(row.offload_optimizer);
      if (ZeroStage{stage}.partitions_parameters())
        label += " param:" + std::string(to_string(row.offload_param)) +
                 " zero_init=" + (row.zero_init ? "1" : "0");
      table.add_row({label, format_size_value(row.cpu_bytes, SizeUnit::GiB), format_size_value(row.gpu_bytes, SizeUnit::GiB),
                     size(states.device(Device::Gpu).peak, unit), size(full.device(Device::Gpu).peak, unit),
                     size(full.device(Device::Cpu).peak, unit)});
    }
  }
  table.print(out);
  out << "zero_init changes only DeepSpeed's CPU figure for loading the model; zerolens models the training step.\n";
}

}  // namespace zerolens::cli
