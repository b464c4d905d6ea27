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

void print_warnings(const Diagnostics& diagnostics) {
  // A finding that is only informative says "note: " itself; the rest are warnings.
  for (const auto& warning : diagnostics.warnings)
    std::cerr << (warning.rfind("note: ", 0) == 0 ? "" : "warning: ") << warning << '\n';
}

}  // namespace zerolens::cli
