// Output: every file the CLI writes, written whole or not at all (issue 19, finding 1).
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>

#include "cli/commands.hpp"
#include "sim/core/file_io.hpp"

namespace zerolens::cli {
namespace {

bool g_output_failed = false;

}  // namespace

Output::Output(const std::string& path) : path_(path) {
  if (path_.empty()) return;
  // Refused before any work: a directory, or a file in a directory that does not exist.
  namespace fs = std::filesystem;
  const fs::path target(path_);
  std::error_code error;
  if (fs::is_directory(target, error))
    throw InputError(path_, "is a directory, not a file to write");
  const fs::path directory = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (!fs::is_directory(directory, error))
    throw InputError(path_, "cannot write: directory '" + directory.string() + "' does not exist");
}

void Output::commit() {
  committed_ = true;
  const std::string text = text_.str();
  if (!path_.empty()) {
    // `plan -c config.json -o config.json` would replace the config it read (issue 19).
    file_io::refuse_output_over_inputs(path_, file_io::files_read());
    return file_io::write_file_atomically(path_, text);
  }
  std::cout << text;
  std::cout.flush();
  if (!std::cout)
    throw InputError("standard output",
                     std::string("cannot write: ") + std::strerror(errno ? errno : EIO));
}

Output::~Output() {
  if (committed_ || std::uncaught_exceptions() > 0) return;  // an error: keep what was there
  try {
    commit();
  } catch (const InputError& error) {
    std::cerr << "error: " << error.what() << '\n';
    g_output_failed = true;
  }
}

bool output_failed() {
  return g_output_failed;
}

}  // namespace zerolens::cli
