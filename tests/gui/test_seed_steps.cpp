// The seed document's 27-step "Visualize ZeRO-DP" table reached as moments of the walkthrough's
// schedule: each step lands on an op whose kind, phase and layer are what the seed's picture and
// caption show (written out below from the seed's text, not from the code's table), or before the
// first op where the seed pictures a state; the step bar and --seed-step take the cursor there
// with the seed's caption, and --rank describes the step as another rank.
#include <gtest/gtest.h>

#include <QTest>
#include <algorithm>
#include <optional>
#include <set>

#include "gui/headless.hpp"
#include "gui/seed_steps.hpp"
#include "gui_test_helpers.hpp"

namespace zerolens::gui {
namespace {

using testing::args;
using testing::expect_refused;
using testing::GuiRun;
using testing::run_gui;
using testing::temp_file;
using testing::variant_settings;

// What the seed's step shows, read from /work/shared/seeds/003_*'s table (the pictures are of
// four GPUs owning a quarter of the model each; zerolens splits every layer four ways, so "GPU k's
// parameters" are the next layer's, gathered from all four).
struct Expected {
  int step;
  std::optional<OpKind> kind;  // nullopt with phase: any op of that phase
  std::optional<Phase> phase;  // neither: the state before the first op
  const char* layer = nullptr;
};

const Expected kExpected[] = {
    {1, {}, {}},  // the GPUs and the model
    {2, {}, {}},  // "Split the whole data into 4 equal parts"
    {3, {}, {}},
    {4, {}, {}},  // "GPU Memory Used by Model Parameters, Gradients and Optimizers"
    {5, {}, {}},
    {6, {}, {}},
    {7, {}, {}},  // "the mixed-precision optimizer keeps an fp32 copy"
    {8, {}, {}},
    {9, {}, {}},
    {10, {}, {}},  // "Forward Pass starts from this step": the cursor is just before it
    {11, OpKind::AllGather, Phase::Forward, "embedding"},  // "Broadcasts ... of GPU 0"
    {12, OpKind::Forward, Phase::Forward, "embedding"},    // its forward on every GPU
    {13, OpKind::Release, Phase::Forward, "embedding"},    // "delete model parameters of GPU 0"
    {14, OpKind::AllGather, Phase::Forward, "h.0"},        // "Replicate ... on the remaining GPUs"
    {15, OpKind::AllGather, Phase::Forward},               // the last part's parameters
    {16, OpKind::Forward, Phase::Forward, "lm_head"},      // "calculate loss on each GPU"
    {17, {}, Phase::Backward},                             // "Backward Propagation from this step"
    {18, OpKind::AllGather, Phase::Backward, "h.1"},
    {19, OpKind::Backward, Phase::Backward, "h.1"},
    {20, OpKind::ReduceScatter, Phase::Backward},  // gradients to their owner
    {21, OpKind::AllGather, Phase::Backward},      // "Replicate ... 18, 19, and 20"
    {22, OpKind::ReduceScatter, Phase::Backward},
    {23, OpKind::ReduceScatter, Phase::Backward},
    {24, {}, Phase::Optimizer},  // "Parameter Update start from this step"
    {25, OpKind::OptimizerStep, Phase::Optimizer},
    {26, OpKind::OptimizerStep, Phase::Optimizer},
    {27, {}, Phase::Optimizer},  // "Training Iteration is completed": the last op
};

TEST(SeedSteps, EachOfTheSeedsStepsIsAnOpOfWhatItShows) {
  const auto planned = plan_settings(walkthrough_settings());
  const Plan& plan = planned->plan;
  const auto& ops = plan.schedule.ops;
  const std::vector<SeedStep> steps = seed_steps(plan);
  ASSERT_EQ(steps.size(), std::size_t(kSeedStepCount));
  std::int64_t previous = -1;
  for (const Expected& expected : kExpected) {
    const SeedStep& step = steps[std::size_t(expected.step - 1)];
    SCOPED_TRACE("seed step " + std::to_string(expected.step) + ": " + seed_step_caption(step));
    EXPECT_EQ(step.number, expected.step);
    EXPECT_GE(step.op, previous) << "the steps never go back";
    previous = step.op;
    if (!expected.phase) {
      EXPECT_EQ(step.op, -1);
      EXPECT_NE(step.zerolens.find("Before the first op"), std::string::npos);
      continue;
    }
    ASSERT_GE(step.op, 0);
    const Op& op = ops[std::size_t(step.op)];
    EXPECT_EQ(op.phase, *expected.phase);
    if (expected.kind) {
      EXPECT_EQ(op.kind, *expected.kind);
    }
    if (expected.layer) {
      EXPECT_EQ(plan.rank_model.layers[std::size_t(op.layer)].name, expected.layer);
    }
  }
  // Where the seed says "from this step" or "completed", the first or last op of the phase.
  const auto first_of = [&](Phase phase) {
    for (std::size_t i = 0; i < ops.size(); ++i)
      if (ops[i].phase == phase) return std::int64_t(i);
    return std::int64_t(-1);
  };
  EXPECT_EQ(steps[10].op, 0) << "GPU 0's parameters: the step's first op";
  EXPECT_EQ(steps[16].op, first_of(Phase::Backward));
  EXPECT_EQ(steps[23].op, first_of(Phase::Optimizer));
  EXPECT_EQ(steps[26].op, std::int64_t(ops.size()) - 1);
  // The reduce-scatters of steps 20, 22 and 23 are three different buckets, in order.
  EXPECT_LT(steps[19].op, steps[21].op);
  EXPECT_LT(steps[21].op, steps[22].op);
  // The seed's captions where it has them, none made up.
  const std::set<int> captioned = {2, 4, 7, 10, 11, 13, 14, 16, 17, 21, 24, 27};
  for (const SeedStep& step : steps)
    EXPECT_EQ(!step.seed_caption.empty(), captioned.count(step.number) == 1) << step.number;
  EXPECT_EQ(steps[10].seed_caption, "Broadcasts model parameters of GPU 0 to other GPUs.");
}

// A larger ZeRO-3 step that prefetches its gathers has the same moments (the GPT-2 1.5B example
// and a 64-GPU LLaMA-2 7B): each step an op of the kind and phase the seed's text says, step 18 the
// gather of the parameters step 19's backward uses (not a prefetch of another layer's), in order.
TEST(SeedSteps, LargerStepsThatPrefetchHaveThemToo) {
  for (const Settings& settings :
       {default_settings(), testing::llama_on_64(OffloadDevice::None, OffloadDevice::None)}) {
    const auto planned = plan_settings(settings);
    const Plan& plan = planned->plan;
    const auto& ops = plan.schedule.ops;
    const std::vector<SeedStep> steps = seed_steps(plan);
    ASSERT_EQ(steps.size(), std::size_t(kSeedStepCount)) << plan.request.model.name;
    for (const Expected& expected : kExpected) {
      const SeedStep& step = steps[std::size_t(expected.step - 1)];
      SCOPED_TRACE(plan.request.model.name + " seed step " + std::to_string(expected.step));
      if (!expected.phase) {
        EXPECT_EQ(step.op, -1);
        continue;
      }
      ASSERT_GE(step.op, 0);
      EXPECT_EQ(ops[std::size_t(step.op)].phase, *expected.phase);
      const OpKind kind = ops[std::size_t(step.op)].kind;
      if (expected.step == 21) {
        // The next layer's gather, or its backward when its gather was prefetched before the
        // reduction.
        EXPECT_TRUE(kind == OpKind::AllGather || kind == OpKind::Backward);
      } else if (expected.kind) {
        EXPECT_EQ(kind, *expected.kind);
      }
    }
    // Step 18 gathers the parameters step 19's backward uses, when they are gathered in backward
    // at all (the last layers' may be kept from the forward).
    const auto& layers = plan.rank_model.layers;
    const Layer& backward = layers[std::size_t(ops[std::size_t(steps[18].op)].layer)];
    const std::int32_t used = backward.shares_params_of >= 0 ? backward.shares_params_of
                                                             : ops[std::size_t(steps[18].op)].layer;
    bool regathered = false;
    for (std::int64_t i = steps[16].op; i < steps[18].op; ++i)
      regathered |=
          ops[std::size_t(i)].kind == OpKind::AllGather && ops[std::size_t(i)].layer == used;
    if (regathered) {
      EXPECT_EQ(ops[std::size_t(steps[17].op)].layer, used) << plan.request.model.name;
    }
    EXPECT_NE(
        steps[17].zerolens.find(layers[std::size_t(ops[std::size_t(steps[17].op)].layer)].name),
        std::string::npos)
        << steps[17].zerolens;
  }
}

TEST(SeedSteps, OnlyAZeroThreeScheduleHasThem) {
  const auto stage2 = plan_settings(
      variant_settings({"", 2, OffloadDevice::None, OffloadDevice::None, std::nullopt}));
  EXPECT_TRUE(seed_steps(stage2->plan).empty());
  MainWindow window(
      variant_settings({"", 2, OffloadDevice::None, OffloadDevice::None, std::nullopt}), false);
  EXPECT_FALSE(window.step_bar().seed_selector().isEnabled());
  EXPECT_FALSE(window.step_bar().show_seed_step(11));
}

TEST(SeedSteps, StepBarShowsTheSeedsCaptionUntilTheCursorMoves) {
  MainWindow window(walkthrough_settings(), false);
  StepBar& bar = window.step_bar();
  ASSERT_TRUE(bar.seed_selector().isEnabled());
  EXPECT_EQ(bar.seed_selector().count(), kSeedStepCount + 1);  // and the "Seed step" title
  ASSERT_TRUE(bar.show_seed_step(11));
  EXPECT_EQ(window.session().step(), 0);
  EXPECT_TRUE(bar.caption().contains(
      "Seed step 11 of 27 (gather GPU 0's parameters): Broadcasts model parameters of GPU 0"));
  EXPECT_EQ(bar.seed_selector().itemText(11), "Seed step 11: gather GPU 0's parameters");
  EXPECT_TRUE(bar.caption().contains("op 1 of"));
  EXPECT_EQ(bar.seed_selector().currentIndex(), 11);
  // Steps 1-10 all sit before the first op: each still shows its own caption.
  ASSERT_TRUE(bar.show_seed_step(2));
  EXPECT_EQ(window.session().step(), -1);
  EXPECT_TRUE(bar.caption().contains("Split the whole data into 4 equal parts"));
  ASSERT_TRUE(bar.show_seed_step(7));
  EXPECT_TRUE(bar.caption().contains("fp32 copy of the parameters"));
  // Once a seed step was chosen, stepping onto another step's op shows that step (op 3 is step
  // 13's release), and off them none.
  const auto op_of = [&](int number) { return bar.seed_steps()[std::size_t(number - 1)].op; };
  window.session().set_step(op_of(13));
  EXPECT_TRUE(bar.caption().contains("Seed step 13 of 27")) << bar.caption().toStdString();
  EXPECT_EQ(bar.seed_selector().currentIndex(), 13);
  std::int64_t off = 0;
  while (std::any_of(bar.seed_steps().begin(), bar.seed_steps().end(),
                     [&](const SeedStep& step) { return step.op == off; }))
    ++off;
  window.session().set_step(off);
  EXPECT_FALSE(bar.caption().contains("Seed step"));
  EXPECT_EQ(bar.seed_selector().currentIndex(), 0);
  // Shift+Right and Shift+Left: the next and the previous step, from a step or from the cursor.
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowActive(&window));
  QTest::keyClick(&window, Qt::Key_Right, Qt::ShiftModifier);
  ASSERT_GT(bar.seed_step(), 1);
  EXPECT_GT(op_of(bar.seed_step()), off);
  EXPECT_LE(op_of(bar.seed_step() - 1), off) << "the first step after the cursor";
  bar.show_seed_step(20);
  QTest::keyClick(&window, Qt::Key_Right, Qt::ShiftModifier);
  EXPECT_EQ(bar.seed_step(), 21);
  EXPECT_EQ(window.session().step(), op_of(21));
  QTest::keyClick(&window, Qt::Key_Left, Qt::ShiftModifier);
  QTest::keyClick(&window, Qt::Key_Left, Qt::ShiftModifier);
  EXPECT_EQ(bar.seed_step(), 19);
  // A new plan starts without a seed step; from the start Shift+Right is step 1 (before the first
  // op, as the next nine).
  window.load_settings(walkthrough_settings());
  EXPECT_EQ(bar.seed_step(), 0);
  QTest::keyClick(&window, Qt::Key_Right, Qt::ShiftModifier);
  EXPECT_EQ(bar.seed_step(), 1);
  EXPECT_EQ(window.session().step(), -1);
}

TEST(SeedSteps, CommandLinePlacesTheCursorAndTheRank) {
  MainWindow window(walkthrough_settings(), false);
  prepare_window(window,
                 parse_command_line(args({"--walkthrough", "--seed-step", "20", "--rank", "2"})));
  EXPECT_EQ(window.step_bar().seed_step(), 20);
  EXPECT_EQ(window.session().selected_rank(), 2);
  EXPECT_EQ(
      window.session().planned()->plan.schedule.ops[std::size_t(window.session().step())].kind,
      OpKind::ReduceScatter);
  EXPECT_TRUE(window.step_bar().caption().contains("rank 2 reduce-scatters"));
  expect_refused({{args({"--walkthrough", "--seed-step", "28"}), "--seed-step: must be between 1"},
                  {args({"--walkthrough", "--seed-step", "3", "--step", "2"}), "give one"},
                  {args({"--rank", "x"}), "--rank: expected an integer"}});
  for (const auto& [flags, expected] : std::vector<std::pair<QStringList, std::string>>{
           {{"--walkthrough", "--stage", "2", "--seed-step", "5"}, "--seed-step: the seed"},
           {{"--walkthrough", "--rank", "4"}, "--rank: must be between 0 and 3"}}) {
    const std::string path = temp_file("seed_refused.png");
    QStringList arguments = flags;
    arguments << "--screenshot" << QString::fromStdString(path);
    const GuiRun run = run_gui(arguments);
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_NE(run.output.find(expected), std::string::npos) << run.output;
  }
  const std::string path = temp_file("seed_11.png");
  const GuiRun run =
      run_gui({"--walkthrough", "--seed-step", "11", "--screenshot", QString::fromStdString(path)});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("seed step 11, on op 1 of"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace zerolens::gui
