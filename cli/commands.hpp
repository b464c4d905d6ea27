#pragma once
// Subcommands register themselves with the app and a callback run after parsing.
#include <fstream>
#include <functional>
#include <iostream>
#include <ostream>
#include <sstream>
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

// Where a command writes: stdout, or the file named by -o. The text is kept until the Output ends
// and then written whole: a file through a temporary beside it (checked writes, fsync, rename), so
// a full disk or a kill leaves the previous file as it was; a device or FIFO (/dev/stdout) written
// in place; stdout flushed. A failed write is printed with the path and the OS error and makes the
// command exit 2 (output_failed). Nothing is written when the Output ends by an exception, nor
// over a file the command read (file_io::files_read: `-c x.json -o x.json` keeps x.json).
class Output {
 public:
  explicit Output(const std::string& path);
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;
  ~Output();
  std::ostream& stream() { return text_; }
  // Writes now; InputError naming the path and the OS error when it fails.
  void commit();

 private:
  std::string path_;
  std::ostringstream text_;
  bool committed_ = false;
};

// True when an Output's write failed (its error printed): the command exits 2.
bool output_failed();

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
