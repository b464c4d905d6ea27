// `zerolens consolidate` (issue 19): an output that is one of the checkpoint's files or lies in its
// step directory is refused before anything is read or written (before, `-o ckpt/latest` replaced
// the checkpoint's `latest` with safetensors bytes), and a failed write (a full disk, /dev/full)
// exits 2 naming the path and the OS error and leaves the previous file whole (before, the file was
// truncated first and left short or empty).
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "exec/io/checkpoint.hpp"
#include "tests/cli/cli_test_support.hpp"
#include "tests/exec/solo_communicator.hpp"

namespace zerolens::cli {
namespace {

namespace fs = std::filesystem;
using cli_testing::quote;
using cli_testing::Result;
using cli_testing::run;

std::string read_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// A one-rank checkpoint of 1000 + 5 parameters under a fresh `name` directory.
fs::path saved_checkpoint(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / name;
  fs::remove_all(dir);
  exec::CheckpointMeta meta;
  meta.model = "test";
  meta.tensors = {{"w", {1000}, 1000}, {"b", {5}, 5}};
  meta.step = 2;
  meta.optimizer = "sgd";
  exec::RankShard shard;
  shard.segments = {{0, 0, 1000}, {1, 0, 5}};
  shard.master.assign(1005, 0.5f);
  testing::SoloCommunicator comm;
  exec::save_checkpoint(dir, meta, shard, comm);
  return dir;
}

TEST(Consolidate, AnOutputOverTheCheckpointIsRefused) {
  const fs::path dir = saved_checkpoint("zerolens_consolidate_over");
  const fs::path step = dir / "step_00000002";
  const std::string latest = read_text(dir / "latest");
  const std::string manifest = read_text(step / "manifest.json");
  const std::string rank_file = read_text(step / "rank_00000.bin");
  for (const fs::path& output :
       {dir / "latest", step / "manifest.json", step / "rank_00000.bin", step / ".." / "latest"}) {
    const Result result =
        run("consolidate " + quote(dir.string()) + " -o " + quote(output.string()));
    EXPECT_EQ(result.exit_code, 2) << output << ": " << result.output;
    EXPECT_NE(result.output.find("is also an input"), std::string::npos) << result.output;
  }
  const Result inside = run("consolidate " + quote(dir.string()) + " -o " +
                            quote((step / "model.safetensors").string()));
  EXPECT_EQ(inside.exit_code, 2) << inside.output;
  EXPECT_NE(inside.output.find("inside the checkpoint's step directory"), std::string::npos)
      << inside.output;
  EXPECT_FALSE(fs::exists(step / "model.safetensors"));
  EXPECT_EQ(read_text(dir / "latest"), latest);
  EXPECT_EQ(read_text(step / "manifest.json"), manifest);
  EXPECT_EQ(read_text(step / "rank_00000.bin"), rank_file);
  const Result beside = run("consolidate " + quote(dir.string()) + " -o " +
                            quote((dir / "model.safetensors").string()));
  EXPECT_EQ(beside.exit_code, 0) << beside.output;
  fs::remove_all(dir);
}

TEST(Consolidate, AFullDeviceIsAnErrorNamingThePath) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const fs::path dir = saved_checkpoint("zerolens_consolidate_full");
  const Result result = run("consolidate " + quote(dir.string()) + " -o /dev/full");
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("/dev/full"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("No space left on device"), std::string::npos) << result.output;
  fs::remove_all(dir);
}

// A write that fails half-way (a 1 KiB file-size limit stands in for a full disk: EFBIG, as root
// too; SIGXFSZ ignored so the write returns the error) keeps the previous safetensors file whole.
TEST(Consolidate, AFailedWriteKeepsThePreviousFileWhole) {
  const fs::path dir = saved_checkpoint("zerolens_consolidate_efbig");
  const fs::path output = dir / "model.safetensors";
  std::ofstream(output) << "previous\n";
  const std::string command =
      "sh -c " +
      quote("trap '' XFSZ; ulimit -f 2; exec " + std::string(ZEROLENS_CLI_BINARY) +
            " consolidate " + quote(dir.string()) + " -o " + quote(output.string())) +
      " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string printed;
  char buffer[4096];
  for (std::size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) printed.append(buffer, n);
  const int status = pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status << ": " << printed;
  EXPECT_NE(printed.find(output.string()), std::string::npos) << printed;
  EXPECT_EQ(read_text(output), "previous\n");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace zerolens::cli
