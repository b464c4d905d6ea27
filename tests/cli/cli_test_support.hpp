#pragma once
// Runs the real `zerolens` binary (ZEROLENS_CLI_BINARY) the way a user's shell does, for the CLI
// tests: the exit code and what it printed.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace zerolens::cli_testing {

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr together (stdout only with merge_stderr = false)
  std::string out;     // stdout only, when merge_stderr = false
};

// `arguments` go to the shell as they are: quote paths with quote().
inline Result run(const std::string& arguments, bool merge_stderr = true) {
  const std::string command =
      std::string(ZEROLENS_CLI_BINARY) + " " + arguments + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  Result result;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> buffer{};
  std::size_t read = 0;
  while ((read = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), read);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (!merge_stderr) result.out = result.output;
  return result;
}

// A shell word in single quotes.
inline std::string quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace zerolens::cli_testing
