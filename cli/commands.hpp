#pragma once
// Subcommands register themselves with the app and a callback run after parsing.
#include <fstream>
#include <functional>
#include <iostream>
#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "sim/core/error.hpp"

namespace zerolens::cli {

class CommandRegistry {
 public:
  void add(CLI::App* command, std::function<int()> action) { commands_.push_back({command, std::move(action)}); }
  int run_selected() const;

 private:
  struct Entry {
    CLI::App* command;
    std::function<int()> action;
  };
  std::vector<Entry> commands_;
};

// Where a command writes: stdout, or the file named by -o.
class Output {
 public:
  explicit Output(const std::string& path);
  std::ostream& stream() { return path_.empty() ? std::cout : file_; }

 private:
  std::string path_;
  std::ofstream file_;
};

void print_warnings(const Diagnostics& diagnostics);

void register_plan_command(CLI::App& app, CommandRegistry& registry);
void register_presets_command(CLI::App& app, CommandRegistry& registry);
void register_trace_command(CLI::App& app, CommandRegistry& registry);
void register_sweep_command(CLI::App& app, CommandRegistry& registry);
void register_run_command(CLI::App& app, CommandRegistry& registry);
void register_validate_command(CLI::App& app, CommandRegistry& registry);
void register_check_measured_command(CLI::App& app, CommandRegistry& registry);
void register_consolidate_command(CLI::App& app, CommandRegistry& registry);
void register_calibrate_command(CLI::App& app, CommandRegistry& registry);

}  // namespace zerolens::cli
