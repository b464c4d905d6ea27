// `zerolens calibrate` through the real binary: the cluster JSON it writes loads in `zerolens
// plan`, its fields are the measurements of the report written in the same run, and bad flags exit
// 2 naming the flag.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"
#include "cuda_expectation.hpp"

#ifdef ZEROLENS_WITH_CUDA
#include "exec/cuda/cuda_status.hpp"
#endif

namespace {

using zerolens::cli_testing::quote;
using zerolens::cli_testing::Result;
using zerolens::cli_testing::run;

namespace fs = std::filesystem;

class CalibrateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "zerolens-cli-calibrate-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    fs::create_directory(dir_ / "nvme");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

nlohmann::json read_json(const std::string& path) {
  std::ifstream file(path);
  return nlohmann::json::parse(file);
}

// Small sizes: this checks the plumbing, not this machine's speed.
const char* kSmall =
    "calibrate --quick --gemm-sizes 32,64 --sizes 4KiB --repeats 1 --nvme-bytes 1MiB";

TEST_F(CalibrateCli, ClusterJsonHoldsTheReportedMeasurementsAndPlansLoadIt) {
  const Result result = run(std::string(kSmall) + " --nvme-path " + path("nvme") +
                            " --block-size 64KiB --queue-depth 4" + " --name here -o " +
                            path("cluster.json") + " --report " + path("report.json"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("STREAM triad"), std::string::npos) << result.output;
  const auto cluster = read_json(path("cluster.json"));
  const auto report = read_json(path("report.json"));
  EXPECT_EQ(cluster.at("name"), "here");
  EXPECT_EQ(report.at("nvme").at("block_size"), 64 * 1024);
  EXPECT_EQ(report.at("nvme").at("queue_depth"), 4);
  const int ranks = report.at("host").at("ranks");
  EXPECT_EQ(cluster.at("node").at("gpus_per_node"), ranks);
  EXPECT_DOUBLE_EQ(cluster.at("node").at("cpu_memory_bandwidth").get<double>(),
                   ranks * report.at("memory").at("triad_bytes_per_second").get<double>());
  EXPECT_DOUBLE_EQ(cluster.at("node").at("nvme_read_bandwidth").get<double>(),
                   report.at("nvme").at("read_bytes_per_second").get<double>());
  double best_gemm = 0;
  for (const auto& gemm : report.at("gemm_fp32"))
    best_gemm = std::max(best_gemm, gemm.at("flops_per_second").get<double>());
  EXPECT_DOUBLE_EQ(cluster.at("gpu").at("peak_flops_fp32").get<double>(), best_gemm);
  EXPECT_TRUE(fs::is_empty(path("nvme")));

  const Result plan = run("plan --model gpt2-124m --cluster " + path("cluster.json") +
                          " --stage 3 --offload-optimizer nvme --nvme-path /nvme");
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_NE(plan.output.find("on here:"), std::string::npos) << plan.output;
  EXPECT_EQ(plan.output.find("warning"), std::string::npos) << plan.output;
}

TEST_F(CalibrateCli, WithoutNvmePathTheClusterHasNoNvme) {
  const Result result = run(std::string(kSmall) + " -o " + path("cluster.json"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("NVMe: not measured"), std::string::npos) << result.output;
  EXPECT_EQ(read_json(path("cluster.json")).at("node").at("nvme_capacity_bytes"), 0);
  EXPECT_EQ(run("plan --cluster " + path("cluster.json")).exit_code, 0);
}

TEST_F(CalibrateCli, BadInputExitsTwoNamingTheFlag) {
  const std::string missing = path("no-such-dir");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" --nvme-path " + missing, "--nvme-path: " + missing},
      {" --nvme-path " + path("nvme") + " --block-size 1000", "--block-size"},
      {" --nvme-path " + path("nvme") + " --queue-depth 0", "queue_depth 0"},
      {" --sizes 4XB", "--sizes: unknown unit 'XB'"},
      {" --nvme-bytes lots", "--nvme-bytes"},
      {" --repeats 0", "--repeats"},
      {" --device bogus", "--device: 'bogus' is not a device"},
      {" -o " + path("missing-dir/cluster.json"), "cannot write"}};
  for (const auto& [flags, message] : cases) {
    const Result result = run(std::string(kSmall) + flags);
    EXPECT_EQ(result.exit_code, 2) << flags << "\n" << result.output;
    EXPECT_NE(result.output.find(message), std::string::npos) << flags << "\n" << result.output;
  }
  const Result help = run("calibrate --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--nvme-path"), std::string::npos);
}

// Without a device (or without CUDA in the build) `--device cuda` stops before measuring anything.
TEST_F(CalibrateCli, DeviceCudaWithoutADeviceExitsTwoSayingWhy) {
  const auto expected = zerolens::cli_testing::no_cuda_device_message();
  if (!expected) GTEST_SKIP() << "a CUDA device is present; this checks the behaviour without one";
  const std::string& reason = *expected;
  const Result result = run(std::string(kSmall) + " --device cuda -o " + path("cluster.json"));
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find(reason), std::string::npos) << result.output;
  EXPECT_FALSE(fs::exists(path("cluster.json")));
}

#ifdef ZEROLENS_WITH_CUDA
// On a GPU: a quick run describes this GPU, and `plan` loads the cluster.
TEST_F(CalibrateCli, DeviceCudaDescribesThisGpuAndPlansLoadIt) {
  const auto probe = zerolens::exec::probe_cuda_devices();
  if (probe.count == 0) GTEST_SKIP() << "no CUDA device: " << probe.reason;
  const Result result = run("calibrate --device cuda --quick --gemm-sizes 1024 --sizes 4KiB -o " +
                            path("cluster.json") + " --report " + path("report.json"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto cluster = read_json(path("cluster.json"));
  const auto report = read_json(path("report.json"));
  cudaDeviceProp properties{};
  ASSERT_EQ(cudaGetDeviceProperties(&properties, 0), cudaSuccess);
  EXPECT_EQ(cluster.at("gpu").at("name"), std::string(properties.name));
  EXPECT_GT(cluster.at("gpu").at("hbm_bandwidth").get<double>(), 0);
  EXPECT_GT(cluster.at("gpu").at("peak_flops_fp32").get<double>(), 0);
  EXPECT_GT(cluster.at("gpu").at("peak_flops_bf16").get<double>(), 0);
  EXPECT_GT(cluster.at("node").at("pcie").at("bandwidth").get<double>(), 0);
  EXPECT_DOUBLE_EQ(cluster.at("gpu").at("hbm_bandwidth").get<double>(),
                   report.at("gpu").at("hbm").at("bytes_per_second").get<double>());
  EXPECT_FALSE(report.at("gpu").at("collective_backend").get<std::string>().empty());

  const Result plan =
      run("plan --model gpt2-124m --cluster " + path("cluster.json") + " --stage 2");
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_NE(plan.output.find(properties.name), std::string::npos) << plan.output;
}
#endif

}  // namespace
