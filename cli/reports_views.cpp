// Tables of the planning views: --compare, --max-model, --deepspeed-estimate.
#include <cctype>
#include <string>

#include "cli/reports.hpp"
#include "cli/table.hpp"
#include "sim/model/lora.hpp"

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

void print_left_out(std::ostream& out, const std::vector<LeftOutVariant>& left_out) {
  for (const auto& [variant, reason] : left_out)
    out << "left out: " << variant.label << ": " << reason << '\n';
}

void print_compare(std::ostream& out, const VariantComparison& comparison, SizeUnit unit) {
  const std::vector<VariantPlan>& plans = comparison.plans;
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
  print_left_out(out, comparison.left_out);
}

void print_compare_csv(std::ostream& out, const VariantComparison& comparison) {
  const std::vector<VariantPlan>& plans = comparison.plans;
  out << "variant,stage,offload_optimizer,offload_param,gpu_peak_bytes,cpu_peak_bytes,nvme_peak_bytes,fits,"
         "network_bytes,pcie_bytes,nvme_io_bytes\n";
  for (const auto& [variant, plan] : plans) {
    out << '"' << variant.label << "\"," << variant.stage << ',' << to_string(variant.offload_optimizer) << ','
        << to_string(variant.offload_param) << ',' << plan.device(Device::Gpu).peak << ','
        << plan.device(Device::Cpu).peak << ',' << plan.device(Device::Nvme).peak << ',' << (plan.fits() ? 1 : 0)
        << ',' << network_traffic(plan) << ',' << pcie_traffic(plan) << ',' << nvme_traffic(plan) << '\n';
  }
}

namespace {

// "llama2-13b: GPU 91.20 GB > 85.90 GB": the next candidate and the first device it overflows.
std::string binding_text(const MaxModel& result) {
  if (!result.binding) return "-";
  const MaxModel::Binding& b = *result.binding;
  std::string device = to_string(b.device);
  for (char& c : device) c = char(std::toupper(static_cast<unsigned char>(c)));
  return b.model_name + ": " + device + " " + format_bytes(b.peak, SizeUnit::GB) +
         (b.allocator_out_of_memory ? " (the caching allocator runs out of its " : " > ") +
         format_bytes(b.capacity, SizeUnit::GB) + (b.allocator_out_of_memory ? ")" : "");
}

}  // namespace

// The workload every candidate is planned with goes first: with the defaults (fp32, micro-batch
// 1, the model's own sequence length, no checkpointing) nothing large fits, and the reader must
// see why.
void print_max_models(std::ostream& out, const MaxModelSearch& search, const PlanRequest& base) {
  const std::vector<MaxModel>& results = search.variants;
  const TrainingConfig& c = base.config;
  out << "zerolens plan --max-model: largest model that fits " << base.dp_size << " x "
      << base.cluster.gpu.name << " (" << base.cluster.name << ")\n"
      << "each candidate planned with " << to_string(c.precision.precision) << ", "
      << to_string(c.optimizer.type) << ", micro-batch " << c.batch.micro_batch_per_gpu.value_or(1)
      << " x seq " << (c.seq_len ? std::to_string(*c.seq_len) : std::string("its own default"))
      << ", activation checkpointing " << (c.activation_checkpointing.enabled ? "on" : "off")
      << " (--precision, --micro-batch, --seq-len, --activation-checkpointing change it)\n";
  if (const std::string lora = lora_summary(base.model); !lora.empty())
    out << "each fine-tuned as the model given: " << lora << '\n';
  out << '\n';
  Table table({"variant", "largest model", "parameters",
               "the next one stops at (GPU per rank, CPU/NVMe per node)"});
  for (const auto& result : results) {
    table.add_row({result.variant.label, result.found ? result.model_name : "none fits",
                   result.found ? format_count(double(result.parameter_count)) : "-",
                   binding_text(result)});
  }
  table.print(out);
  print_left_out(out, search.left_out);
}

void print_max_models_csv(std::ostream& out, const std::vector<MaxModel>& results) {
  out << "variant,found,model,parameter_count,binding_model,binding_device,binding_peak_bytes,"
         "binding_capacity_bytes\n";
  for (const auto& result : results) {
    const auto& b = result.binding;
    out << '"' << result.variant.label << "\"," << (result.found ? 1 : 0) << ','
        << result.model_name << ',' << result.parameter_count << ',' << (b ? b->model_name : "")
        << ',' << (b ? to_string(b->device) : "") << ',' << (b ? std::to_string(b->peak) : "")
        << ',' << (b ? std::to_string(b->capacity) : "") << '\n';
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
