// `zerolens consolidate`: one fp32 safetensors file from a ZeRO checkpoint's partitions (what
// DeepSpeed's zero_to_fp32.py does), verifying every rank file on the way.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "exec/io/checkpoint.hpp"
#include "sim/core/error.hpp"
#include "sim/core/file_io.hpp"

namespace zerolens::cli {
namespace {

struct ConsolidateCommand {
  std::string checkpoint, output;
};

namespace fs = std::filesystem;

// Refuses, before anything is read or written, an output that is one of the checkpoint's files
// (`latest`, the manifest, a rank file: by device and inode, so another spelling or a hard link is
// caught) or lies inside its step directory.
void refuse_output_over_checkpoint(const std::string& output, const fs::path& checkpoint,
                                   const fs::path& step_directory) {
  std::vector<std::string> inputs = {(checkpoint / "latest").string(),
                                     (step_directory / "manifest.json").string()};
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(step_directory, error))
    inputs.push_back(entry.path().string());
  file_io::refuse_output_over_inputs(output, inputs);
  const fs::path parent = fs::weakly_canonical(fs::absolute(output, error).parent_path(), error);
  const fs::path step = fs::weakly_canonical(fs::absolute(step_directory, error), error);
  for (fs::path at = parent; !at.empty(); at = at.parent_path()) {
    if (at == step)
      throw InputError(output, "is inside the checkpoint's step directory " +
                                   step_directory.string() + ": refusing to write there");
    if (at == at.parent_path()) break;
  }
}

int run_consolidate(const ConsolidateCommand& command) {
  const auto step_directory = exec::resolve_checkpoint(command.checkpoint);
  refuse_output_over_checkpoint(command.output, command.checkpoint, step_directory);
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
