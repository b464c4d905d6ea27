#include "cli/commands.hpp"

#include <fstream>
#include <iostream>

#include "cli/app.hpp"

namespace zerolens::cli {

int CommandRegistry::run_selected() const {
  for (const auto& entry : commands_) {
    if (entry.command->parsed()) return entry.action();
  }
  return kExitInvalidInput;
}

Output::Output(const std::string& path) : path_(path) {
  if (path_.empty()) return;
  file_.open(path_);
  if (!file_) throw InputError("--output", "cannot write '" + path_ + "'");
}

void print_warnings(const Diagnostics& diagnostics) {
  for (const auto& warning : diagnostics.warnings) std::cerr << "warning: " << warning << '\n';
}

}  // namespace zerolens::cli
