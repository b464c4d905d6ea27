// `zerolens consolidate`: one fp32 safetensors file from a ZeRO checkpoint's partitions (what
// DeepSpeed's zero_to_fp32.py does), verifying every rank file on the way.
#include <iostream>
#include <memory>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "exec/io/checkpoint.hpp"

namespace zerolens::cli {
namespace {

struct ConsolidateCommand {
  std::string checkpoint, output;
};

int run_consolidate(const ConsolidateCommand& command) {
  const auto step_directory = exec::resolve_checkpoint(command.checkpoint);
  const exec::FullState state = exec::load_checkpoint(step_directory);
  exec::write_safetensors(command.output, state);
  Elements parameters = 0;
  for (const auto& tensor : state.meta.tensors) parameters += tensor.numel;
  std::cout << "consolidated " << step_directory.string() << " (model " << state.meta.model << ", step "
            << state.meta.step << ", saved by " << state.meta.dp_size << " rank(s), ZeRO stage " << state.meta.stage
            << ")\n  into " << command.output << ": " << state.meta.tensors.size() << " fp32 tensors, " << parameters
            << " parameters\n";
  return kExitOk;
}

}  // namespace

void register_consolidate_command(CLI::App& app, CommandRegistry& registry) {
  auto command = std::make_shared<ConsolidateCommand>();
  CLI::App* consolidate = app.add_subcommand(
      "consolidate", "Write a ZeRO checkpoint's fp32 master weights as one safetensors file");
  consolidate->add_option("checkpoint", command->checkpoint, "Checkpoint directory (its latest step) or a step directory")
      ->required();
  consolidate->add_option("-o,--output", command->output, "The .safetensors file to write")->required();
  registry.add(consolidate, [command] { return run_consolidate(*command); });
}

}  // namespace zerolens::cli
