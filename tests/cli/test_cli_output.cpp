// Every file the CLI writes goes through Output (issue 19, finding 1): a failed write exits 2 with
// the path and the OS error, and leaves the previous file whole; before, `-o /dev/full` exited 0.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "cli/commands.hpp"
#include "sim/core/file_io.hpp"
#include "tests/cli/cli_test_support.hpp"

namespace zerolens::cli {
namespace {

namespace fs = std::filesystem;
using cli_testing::Result;
using cli_testing::run;

std::string read_text(const fs::path& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST(Output, AFullDeviceIsAnErrorNamingThePath) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  for (const std::string command :
       {"plan --model gpt2-tiny -o /dev/full", "sweep --model gpt2-tiny --quiet -o /dev/full",
        "trace --model gpt2-tiny -o /dev/full"}) {
    const Result result = run(command);
    EXPECT_EQ(result.exit_code, 2) << command << '\n' << result.output;
    EXPECT_NE(result.output.find("/dev/full: cannot write"), std::string::npos) << result.output;
    EXPECT_NE(result.output.find("No space left on device"), std::string::npos) << result.output;
  }
  const Result stdout_full = run("plan --model gpt2-tiny > /dev/full");
  EXPECT_EQ(stdout_full.exit_code, 2) << stdout_full.output;
}

TEST(Output, AFailedWriteKeepsThePreviousFileWhole) {
  const fs::path directory = fs::temp_directory_path() / "zerolens_output_test";
  fs::remove_all(directory);
  fs::create_directories(directory);
  const fs::path file = directory / "plan.txt";
  std::ofstream(file) << "previous\n";
  file_io::write_file_atomically(file.string(), "new text\n");
  EXPECT_EQ(read_text(file), "new text\n");
  // A write that fails half-way (a file-size limit stands in for a full disk: EFBIG after 100
  // bytes, as root too): the previous file is kept whole and the error says so. In a child process,
  // which the limit must not outlive.
  const pid_t child = fork();
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{100, 100};
    setrlimit(RLIMIT_FSIZE, &limit);
    try {
      file_io::write_file_atomically(file.string(), std::string(1000, 'x'));
    } catch (const InputError& error) {
      const std::string message = error.what();
      _exit(message.find("previous file") != std::string::npos ? 0 : 3);
    }
    _exit(4);  // no error: the test fails
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_EQ(read_text(file), "new text\n");
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(directory)) ++entries;
  EXPECT_EQ(entries, 1u);  // no temporary left beside it
  fs::remove_all(directory);
}

TEST(Output, AMissingDirectoryIsRefusedBeforeAnyWork) {
  const Result result = run("plan --model gpt2-tiny -o /no/such/dir/plan.txt");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find("does not exist"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace zerolens::cli
