// `zerolens run/validate --device`: without a GPU (or CUDA in the build) cuda exits 2 saying why
// before training; an unknown device is refused naming the flag. On a GPU the CUDA backend follows
// the CPU backend's losses and passes `validate` (byte-exact model states and traffic).
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli_test_support.hpp"
#include "cuda_expectation.hpp"

#ifdef ZEROLENS_WITH_CUDA
#include "exec/cuda/cuda_status.hpp"
#endif

namespace {

using zerolens::cli_testing::Result;
using zerolens::cli_testing::run;

constexpr const char* kSmall = "--steps 5 --stage 2 --precision bf16 --log-every 1";

// The loss column of `run`'s step lines (used by the CUDA build's test only).
[[maybe_unused]] std::vector<double> losses_of(const std::string& output) {
  std::vector<double> losses;
  std::istringstream lines(output);
  std::string line;
  bool table = false;
  while (std::getline(lines, line)) {
    if (line.find("step        loss") != std::string::npos) {
      table = true;
      continue;
    }
    std::istringstream fields(line);
    long step = 0;
    double loss = 0;
    if (table && fields >> step >> loss)
      losses.push_back(loss);
    else if (table)
      table = false;
  }
  return losses;
}

TEST(RunDevice, UnknownDeviceIsRefusedNamingTheFlag) {
  for (const char* command : {"run", "validate"}) {
    const Result result = run(std::string(command) + " --device tpu --steps 1");
    EXPECT_NE(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("--device"), std::string::npos) << result.output;
  }
  const Result help = run("run --help");
  EXPECT_NE(help.output.find("--device"), std::string::npos);
}

TEST(RunDevice, CudaWithoutADeviceExitsTwoBeforeTraining) {
  const auto expected = zerolens::cli_testing::no_cuda_device_message();
  if (!expected) GTEST_SKIP() << "a CUDA device is present; this checks the behaviour without one";
  const std::string& reason = *expected;
  for (const char* command : {"run", "validate"}) {
    const Result result = run(std::string(command) + " --device cuda " + kSmall);
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_NE(result.output.find(reason), std::string::npos) << result.output;
    EXPECT_EQ(result.output.find("step        loss"), std::string::npos) << "trained anyway:\n"
                                                                         << result.output;
  }
}

#ifdef ZEROLENS_WITH_CUDA
// fp32 GEMMs without TF32 and the same data: bf16 rounding keeps both within 2% of each other.
TEST(RunDevice, CudaFollowsTheCpuBackendsLossesAndValidates) {
  const auto probe = zerolens::exec::probe_cuda_devices();
  if (probe.count == 0) GTEST_SKIP() << "no CUDA device: " << probe.reason;
  const Result cpu = run(std::string("run ") + kSmall);
  const Result gpu = run(std::string("run --device cuda ") + kSmall);
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
  EXPECT_NE(gpu.output.find("CUDA device backend"), std::string::npos) << gpu.output;
  const std::vector<double> expected = losses_of(cpu.output), measured = losses_of(gpu.output);
  ASSERT_EQ(expected.size(), 5u) << cpu.output;
  ASSERT_EQ(measured.size(), expected.size()) << gpu.output;
  for (std::size_t step = 0; step < expected.size(); ++step) {
    EXPECT_NEAR(measured[step], expected[step], 0.02 * expected[step]) << "step " << step + 1;
  }
  const Result validated = run("validate --device cuda --steps 3 --stage 3 --log-every 0");
  EXPECT_EQ(validated.exit_code, 0) << validated.output;
}
#endif

}  // namespace
