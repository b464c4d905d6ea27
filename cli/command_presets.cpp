// `zerolens presets`: the model and cluster presets, with their sizes.
#include <iostream>
#include <memory>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "cli/table.hpp"
#include "sim/hardware/cluster_json.hpp"
#include "sim/hardware/hardware.hpp"
#include "sim/model/layers_json.hpp"
#include "sim/model/model.hpp"
#include "sim/model/model_io.hpp"
#include "sim/model/presets.hpp"

#include <nlohmann/json.hpp>

namespace zerolens::cli {

namespace {

struct PresetsCommand {
  std::string model_json;    // export this model as a layer list
  std::string cluster_json;  // export this cluster as JSON
};

int export_json(const PresetsCommand& command) {
  Diagnostics diagnostics;
  if (!command.model_json.empty()) {
    std::cout << model_to_json(load_model(command.model_json, diagnostics)).dump(2) << '\n';
  }
  if (!command.cluster_json.empty()) {
    std::cout << cluster_to_json(load_cluster(command.cluster_json, diagnostics)).dump(2) << '\n';
  }
  print_warnings(diagnostics);
  return kExitOk;
}

}  // namespace

void register_presets_command(CLI::App& app, CommandRegistry& registry) {
  CLI::App* presets = app.add_subcommand("presets", "List model and cluster presets, or export one as JSON");
  auto command = std::make_shared<PresetsCommand>();
  presets->add_option("--model-json", command->model_json,
                      "Print a model (preset, dense:<N> or file) as the layer-list JSON of docs/model-format.md");
  presets->add_option("--cluster-json", command->cluster_json, "Print a cluster (preset or file) as cluster JSON");
  registry.add(presets, [command] {
    if (!command->model_json.empty() || !command->cluster_json.empty()) return export_json(*command);
    Table models({"model", "parameters", "layers", "default seq"});
    for (const auto& name : model_preset_names()) {
      const Model model = model_from_preset(name);
      models.add_row({name, std::to_string(model.parameter_count()), std::to_string(model.layers.size()),
                      std::to_string(model.default_seq_len)});
    }
    std::cout << "Models (also dense:<N> for a synthetic model of exactly N parameters)\n";
    models.print(std::cout);
    Table clusters({"cluster", "nodes x GPUs", "GPU", "GPU memory", "CPU/node"});
    for (const auto& name : cluster_preset_names()) {
      const Cluster cluster = cluster_from_preset(name);
      clusters.add_row({name, std::to_string(cluster.nodes) + " x " + std::to_string(cluster.node.gpus_per_node),
                        cluster.gpu.name, format_bytes(cluster.gpu.memory_bytes, SizeUnit::GiB),
                        format_bytes(cluster.node.cpu_memory_bytes, SizeUnit::GiB)});
    }
    std::cout << "\nClusters\n";
    clusters.print(std::cout);
    return kExitOk;
  });
}

}  // namespace zerolens::cli
