// `zerolens presets`: the model and cluster presets, with their sizes.
#include <iostream>
#include <memory>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "cli/table.hpp"
#include "sim/hardware.hpp"
#include "sim/model.hpp"

namespace zerolens::cli {

void register_presets_command(CLI::App& app, CommandRegistry& registry) {
  CLI::App* presets = app.add_subcommand("presets", "List model and cluster presets");
  registry.add(presets, [] {
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
