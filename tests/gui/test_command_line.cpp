// The command line: flags build the settings as `zerolens plan` spells them, bad flags name
// themselves, and the headless screenshot command renders each view with no display.
#include <gtest/gtest.h>
#include <QImage>
#include <QProcess>

#include "gui/command_line.hpp"
#include "gui_test_helpers.hpp"
#include "sim/plan/walkthrough.hpp"

namespace zerolens::gui {
namespace {

using testing::args;
using testing::expect_refused;
using testing::GuiRun;
using testing::run_gui;
using testing::temp_file;

TEST(CommandLine, FlagsBuildTheSettings) {
  const CommandLine line = parse_command_line(args({"--model",
                                                    "gpt2-124m",
                                                    "--gpus",
                                                    "16",
                                                    "--stage",
                                                    "2",
                                                    "--offload-optimizer",
                                                    "cpu",
                                                    "--precision",
                                                    "bf16",
                                                    "--micro-batch",
                                                    "2",
                                                    "--seq-len",
                                                    "512",
                                                    "--activation-checkpointing",
                                                    "false",
                                                    "--view",
                                                    "timeline",
                                                    "--step",
                                                    "12",
                                                    "--size",
                                                    "800x600",
                                                    "--scale",
                                                    "peak"}));
  const auto planned = plan_settings(line.settings);
  const ScheduleContext& c = planned->plan.schedule.context;
  EXPECT_EQ(planned->plan.request.model.name, "gpt2-124m");
  EXPECT_EQ(c.dp_size, 16);
  EXPECT_EQ(c.stage, 2);
  EXPECT_EQ(c.optimizer_device, OffloadDevice::Cpu);
  EXPECT_EQ(c.precision, Precision::Bf16);
  EXPECT_EQ(c.micro_batch, 2);
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_FALSE(c.activation_checkpointing);
  EXPECT_EQ(line.view, View::Timeline);
  EXPECT_EQ(line.step, 11);  // --step 12 is op 12 as the step bar numbers them: index 11
  EXPECT_EQ(line.size, QSize(800, 600));
  EXPECT_EQ(line.scale, ScaleMode::Peak);
}

// Issue 22: whatever the flags do not give is `zerolens plan`'s default, not the GPT-2 1.5B
// example's (A100-40GB, the optimizer on the CPU); without config flags the example opens.
TEST(CommandLine, WhatIsNotGivenIsTheCliDefault) {
  const CommandLine line =
      parse_command_line(args({"--model", "llama2-7b", "--gpus", "64", "--stage", "3"}));
  const auto planned = plan_settings(line.settings);
  const PlanRequest& r = planned->plan.request;
  EXPECT_EQ(r.cluster.gpu.name, cluster_from_preset("dgx-a100-80gb").gpu.name);
  EXPECT_EQ(r.config.zero.offload_optimizer.device, OffloadDevice::None);
  EXPECT_EQ(r.config.precision.precision, Precision::Fp32);
  EXPECT_EQ(planned->plan.batch.micro_batch_per_gpu, 1);
  EXPECT_FALSE(r.config.activation_checkpointing.enabled);
  const CommandLine example = parse_command_line(args({"--view", "timeline"}));
  EXPECT_EQ(example.settings.model_source, "gpt2-1.5b");
  EXPECT_EQ(example.settings.cluster_source, "dgx-a100-40gb");
}

// The framework flags reach the plan the GUI draws: FSDP2 with its default foreach Adam holds the
// optimizer's temporaries at the step; --optimizer-kernel fused removes them.
TEST(CommandLine, FrameworkAndOptimizerKernelReachThePlan) {
  const auto temporaries = [](const char* kernel) {
    const CommandLine line = parse_command_line(
        args({"--model", "gpt2-tiny", "--gpus", "2", "--framework", "fsdp2", "--offload-optimizer",
              "none", "--offload-param", "none", "--optimizer-kernel", kernel}));
    const auto planned = plan_settings(line.settings);
    EXPECT_TRUE(planned->plan.request.config.is_fsdp());
    Bytes total = 0;
    for (const Op& op : planned->plan.schedule.ops) {
      for (const auto& effect : planned->plan.schedule.effects_of(op)) {
        if (effect.component == Component::OptimizerTemporaries && effect.bytes > 0)
          total += effect.bytes;
      }
    }
    return total;
  };
  EXPECT_GT(temporaries("foreach"), 0);
  EXPECT_EQ(temporaries("fused"), 0);
}

// ZeRO++'s flags reach the plan the GUI draws: its all-to-all hops and the hpZ group's gathers
// (a reuse distance of 0 releases every layer in forward, so backward gathers from the copies).
TEST(CommandLine, ZeroPlusPlusFlagsReachThePlan) {
  const std::string config = temp_file("zeropp_reuse.json", R"({"train_micro_batch_size_per_gpu": 1,
                               "zero_optimization": {"stage": 3, "stage3_max_reuse_distance": 0}})");
  const CommandLine line = parse_command_line(
      args({"--model", "gpt2-124m", "--cluster", "dgx-a100-80gb", "--gpus", "16",
            "--deepspeed-config", config.c_str(), "--precision", "bf16", "--hpz", "8",
            "--quantized-weights", "true", "--quantized-gradients", "true", "--view", "traffic"}));
  const auto planned = plan_settings(line.settings);
  const ScheduleContext& c = planned->plan.schedule.context;
  EXPECT_EQ(c.hpz_group, 8);
  EXPECT_TRUE(c.quantized_weights && c.quantized_gradients);
  EXPECT_GT(planned->plan.comm.secondary[std::size_t(OpKind::AllGather)].calls, 0);
  EXPECT_GT(planned->plan.comm.cross_node[std::size_t(OpKind::AllToAll)].calls, 0);
  expect_refused({{args({"--hpz", "none"}), "--hpz"},
                  {args({"--quantized-gradients", "maybe"}), "--quantized-gradients"}});
}

TEST(CommandLine, TheWalkthroughFlagIsTheSharedWalkthrough) {
  const CommandLine line = parse_command_line(args({"--walkthrough"}));
  const auto planned = plan_settings(line.settings);
  const Plan reference = make_plan(walkthrough_request());
  EXPECT_EQ(planned->plan.schedule.ops.size(), reference.schedule.ops.size());
  EXPECT_EQ(planned->plan.device(Device::Gpu).peak, reference.device(Device::Gpu).peak);
  EXPECT_EQ(planned->plan.schedule.layout.persistent, 0);
}

TEST(CommandLine, BadFlagsNameTheFlag) {
  const std::vector<std::pair<QStringList, std::string>> cases = {
      {args({"--stage", "5"}), "--stage"},
      {args({"--gpus", "many"}), "--gpus"},
      {args({"--view", "pie"}), "--view"},
      {args({"--size", "10x10"}), "--size"},
      {args({"--offload-optimizer", "tape"}), "--offload-optimizer"},
      {args({"--precision", "fp8"}), "--precision"},
      {args({"--activation-checkpointing", "maybe"}), "--activation-checkpointing"},
      {args({"--show", "some"}), "--show"},
      {args({"--model", "no-such-model"}), "no-such-model"},
      {args({"--no-such-flag"}), "no-such-flag"},
      {args({"extra"}), "extra"}};
  expect_refused(cases);
}

TEST(Headless, ScreenshotRendersEachViewWithoutADisplay) {
  for (const char* view : {"ranks", "timeline", "memory", "traffic", "compare"}) {
    const std::string path = temp_file(std::string("headless_") + view + ".png");
    const GuiRun run = run_gui({"--walkthrough", "--screenshot", QString::fromStdString(path),
                                "--view", view, "--step", "3", "--size", "1000x650"});
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_EQ(QImage(QString::fromStdString(path)).size(), QSize(1000, 650)) << view;
  }
  const std::string svg = temp_file("headless.svg");
  const GuiRun run =
      run_gui({"--model", "gpt2-124m", "--gpus", "8", "--stage", "3", "--offload-optimizer", "cpu",
               "--screenshot", QString::fromStdString(svg), "--step", "40"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // The op numbers are the step bar's: --step 10 is "op 10", 0 is before the first.
  const std::string numbered = temp_file("headless_numbered.png");
  const GuiRun tenth =
      run_gui({"--walkthrough", "--screenshot", QString::fromStdString(numbered), "--step", "10"});
  ASSERT_EQ(tenth.exit_code, 0) << tenth.output;
  const auto ops = plan_settings(walkthrough_settings())->plan.schedule.ops.size();
  EXPECT_NE(tenth.output.find("cursor on op 10 of " + std::to_string(ops) + ")"), std::string::npos)
      << tenth.output;
  const GuiRun before =
      run_gui({"--walkthrough", "--screenshot", QString::fromStdString(numbered), "--step", "0"});
  EXPECT_NE(before.output.find("cursor before the first op"), std::string::npos) << before.output;
}

TEST(Headless, BadInputExitsWithStatusTwoAndNamesIt) {
  const std::string out = temp_file("never.png");
  const std::string bad_trace =
      temp_file("headless_bad_trace.json", "{\"schema\": \"zerolens.trace\", \"version\": 3}");
  const std::vector<std::pair<QStringList, std::string>> cases = {
      {{"--walkthrough", "--screenshot", QString::fromStdString(out), "--step", "100000"},
       "--step"},
      {{"--screenshot", QString::fromStdString(out), "--trace", QString::fromStdString(bad_trace)},
       "version"},
      {{"--screenshot", QString::fromStdString(out), "--stage", "2", "--offload-param", "cpu"},
       "offload_param"},
      {{"--screenshot", QString::fromStdString(temp_file("out.gif")), "--walkthrough"},
       "unknown image type"},
      {{"--screenshot", QString::fromStdString(out), "--gpus", "0"}, "--gpus"},
      {{"--walkthrough"},
       "no display"}};  // the window needs a display; the message says what to do
  for (const auto& [arguments, expected] : cases) {
    const GuiRun run = run_gui(arguments);
    EXPECT_EQ(run.exit_code, 2) << arguments.join(' ').toStdString() << "\n" << run.output;
    EXPECT_NE(run.output.find(expected), std::string::npos) << run.output;
  }
}

TEST(Headless, HelpNeedsNoDisplay) {
  const GuiRun run = run_gui({"--help"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_NE(run.output.find("--screenshot"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace zerolens::gui
