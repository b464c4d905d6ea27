#include "cli/app.hpp"

#include <cstdlib>
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

// CLI11's message for a parse error (ours for an unknown flag), and the exit code.
int parse_failure(CLI::App& app, const CLI::ParseError& error) {
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    const std::string message = unknown_flag_message(app);
    if (!message.empty()) {
      std::cerr << "error: " << message << "\nRun with --help for more information.\n";
      return kExitInvalidInput;
    }
  }
  return app.exit(error) == 0 ? kExitOk : kExitInvalidInput;
}

}  // namespace

int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    char* end = nullptr;
    const long rank = std::strtol(value, &end, 10);
    if (*end == '\0' && rank >= 0) return int(rank);
  }
  return 0;
}

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
  } catch (const CLI::ParseError& error) {
    // Every rank of an MPI job parses the same flags: the first one says what is wrong.
    if (launcher_rank() > 0) return error.get_exit_code() == 0 ? kExitOk : kExitInvalidInput;
    return parse_failure(app, error);
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
  } catch (const QuietExit& quiet) {
    return quiet.code;
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
