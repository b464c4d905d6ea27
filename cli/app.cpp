#include "cli/app.hpp"

#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "exec/io/checkpoint.hpp"
#include "exec/io/nvme_io.hpp"
#include "sim/core/error.hpp"

namespace zerolens::cli {
namespace {

// An unknown flag named in the order it was typed, with the closest flag of its command (CLI11
// says "The following arguments were not expected: 4 --micro-batch-size", values first).
std::string unknown_flag_message(const CLI::App& app) {
  for (const CLI::App* command : app.get_subcommands()) {
    for (const std::string& extra : command->remaining()) {
      if (extra.rfind("-", 0) != 0) continue;
      const std::string flag = extra.substr(0, extra.find('='));
      std::vector<std::string> flags;
      for (const CLI::Option* option : command->get_options()) {
        for (const std::string& name : option->get_lnames()) flags.push_back("--" + name);
      }
      const std::string hint = closest_name(flag, flags);
      return flag + ": not a flag of `zerolens " + command->get_name() + "`" +
             (hint.empty() ? "" : " (did you mean '" + hint + "'?)");
    }
  }
  return {};
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{"zerolens: plan, simulate, run and visualise ZeRO data-parallel training.\n"
               "Memory per rank and device, traffic per link, for DP and ZeRO-1/2/3 with CPU/NVMe offload."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "zerolens 0.1.0");
  CommandRegistry registry;
  register_plan_command(app, registry);
  register_presets_command(app, registry);
  register_trace_command(app, registry);
  register_sweep_command(app, registry);
  register_run_command(app, registry);
  register_validate_command(app, registry);
  register_check_measured_command(app, registry);
  register_consolidate_command(app, registry);
  register_calibrate_command(app, registry);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError& error) {
    const std::string message = unknown_flag_message(app);
    if (message.empty()) return app.exit(error) == 0 ? kExitOk : kExitInvalidInput;
    std::cerr << "error: " << message << "\nRun with --help for more information.\n";
    return kExitInvalidInput;
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? kExitOk : kExitInvalidInput;
  }
  try {
    const int code = registry.run_selected();
    // What went to standard output outside an Output (tables, progress) must have been written too.
    std::cout.flush();
    if (!std::cout && !output_failed()) {
      std::cerr << "error: standard output: cannot write\n";
      return kExitInvalidInput;
    }
    return output_failed() ? kExitInvalidInput : code;
  } catch (const InputError& error) {
    std::cerr << "error: " << error.what() << '\n';
    return kExitInvalidInput;
  } catch (const exec::CheckpointError& error) {
    std::cerr << "error: checkpoint: " << error.what() << '\n';
    return kExitInvalidInput;
  } catch (const exec::NvmeError& error) {  // a full or failing drive under nvme_path
    std::cerr << "error: nvme offload: " << error.what() << '\n';
    return kExitInvalidInput;
  } catch (const std::exception& error) {
    std::cerr << "internal error: " << error.what() << '\n';
    return kExitInternal;
  }
}

}  // namespace zerolens::cli
