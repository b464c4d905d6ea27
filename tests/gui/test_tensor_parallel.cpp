// Tensor parallelism in the GUI: --tp/--sp and the panel's controls reach the plan, bad values name
// their flag, the config file and traces keep them, the rank view labels each rank with its (tp,
// dp) coordinate and draws the tensor-parallel group at a TP collective, the timeline gives the
// "tp" stream its own row in its colour, and the traffic chart lists the TP group's collectives.
#include <gtest/gtest.h>
#include <QBarCategoryAxis>
#include <QChart>
#include <QGraphicsSimpleTextItem>
#include <QImage>
#include <QProcess>
#include <QRegularExpression>
#include <QTest>

#include <map>
#include <set>

#include "gui/command_line.hpp"
#include "gui/config_file.hpp"
#include "gui/main_window.hpp"
#include "gui/op_words.hpp"
#include "gui/palette.hpp"
#include "gui/rank_scene.hpp"
#include "gui/timeline_scene.hpp"
#include "gui_test_helpers.hpp"

namespace zerolens::gui {
namespace {

using testing::args;
using testing::data_int;
using testing::expect_refused;
using testing::GuiRun;
using testing::height_of;
using testing::items_with_role;
using testing::run_gui;
using testing::temp_file;

// The walkthrough's gpt2-tiny on 8 GPUs: tensor parallel 2 x data parallel 4.
Settings tp_settings(bool sequence_parallel = false) {
  Settings settings = walkthrough_settings();
  settings.gpus = 8;
  set_tensor_parallel(settings, 2);
  set_sequence_parallel(settings, sequence_parallel);
  return settings;
}

// The rank view's title line (the run: model, GPUs, groups, stage).
QString rank_view_title(const Planned& planned) {
  QGraphicsScene scene;
  build_rank_scene(scene, planned, -1, 0, RankViewOptions{});
  for (QGraphicsItem* item : scene.items())
    if (auto* text = dynamic_cast<QGraphicsSimpleTextItem*>(item))
      if (text->text().contains(" parameters) on ")) return text->text();
  return {};
}

std::int64_t first_collective(const Plan& plan, ProcessGroup group) {
  const auto& ops = plan.schedule.ops;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].link == Link::Network && ops[i].group == group) return std::int64_t(i);
  }
  return -1;
}

std::vector<int> column_ranks(const RankLayout& layout) {
  std::vector<int> ranks;
  for (const auto& column : layout.columns) ranks.push_back(column.rank);
  return ranks;
}

// The texts under each column, by rank.
std::map<int, QStringList> rank_labels(const QGraphicsScene& scene) {
  std::map<int, QStringList> labels;
  for (QGraphicsItem* item : items_with_role(scene, ItemRole::RankLabel)) {
    labels[data_int(item, item_key::Rank)] << static_cast<QGraphicsSimpleTextItem*>(item)->text();
  }
  for (auto& [rank, texts] : labels) texts.sort();
  return labels;
}

TEST(TensorParallel, RanksArePlacedTensorParallelInnermost) {
  EXPECT_EQ(coordinate_of(5, 2), (RankCoordinate{.tp = 1, .dp = 2}));
  EXPECT_EQ(coordinate_of(5, 1), (RankCoordinate{.tp = 0, .dp = 5}));
  EXPECT_EQ(coordinate_of(13, 4), (RankCoordinate{.tp = 1, .dp = 3}));
  EXPECT_EQ(coordinate_label(5, 2), "(tp 1, dp 2)");
  EXPECT_EQ(group_ranks(ProcessGroup::Tensor, 5, 2, 4), (std::vector<int>{4, 5}));
  EXPECT_EQ(group_ranks(ProcessGroup::Data, 5, 2, 4), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(group_words({4, 5}), "ranks 4-5");
  EXPECT_EQ(group_words({1, 3, 5, 7}), "ranks 1, 3, 5, 7");
  EXPECT_EQ(group_words(group_ranks(ProcessGroup::Data, 1, 2, 32)),
            "ranks 1, 3, ..., 63 (2 apart)");
}

TEST(TensorParallel, EachDrawnRankIsLabelledWithItsCoordinate) {
  const auto planned = plan_settings(tp_settings());
  ASSERT_EQ(planned->plan.schedule.context.tensor_parallel, 2);
  ASSERT_EQ(planned->plan.schedule.context.dp_size, 4);
  QGraphicsScene scene;
  const RankLayout layout = build_rank_scene(scene, *planned, -1, 5, RankViewOptions{});
  // Before the step: rank 5's data-parallel group, the ranks ZeRO partitions over.
  EXPECT_EQ(layout.group, ProcessGroup::Data);
  EXPECT_EQ(column_ranks(layout), (std::vector<int>{1, 3, 5, 7}));
  const auto labels = rank_labels(scene);
  EXPECT_EQ(labels.at(5), (QStringList{"(tp 1, dp 2)", "rank 5"}));
  EXPECT_EQ(labels.at(1), (QStringList{"(tp 1, dp 0)", "rank 1"}));
  EXPECT_EQ(labels.at(7), (QStringList{"(tp 1, dp 3)", "rank 7"}));
  // A column's partitions belong to its data-parallel index.
  for (QGraphicsItem* item : items_with_role(scene, ItemRole::Block)) {
    const auto component = Component(data_int(item, item_key::Component));
    if (sharing_of(component) != Sharing::Partitioned) continue;
    EXPECT_EQ(data_int(item, item_key::Owner), data_int(item, item_key::Rank) / 2)
        << to_string(component);
  }
}

TEST(TensorParallel, WithoutTensorParallelismRanksHaveNoCoordinate) {
  const auto planned = plan_settings(walkthrough_settings());
  QGraphicsScene scene;
  build_rank_scene(scene, *planned, 3, 2, RankViewOptions{});
  const auto labels = rank_labels(scene);
  ASSERT_EQ(labels.size(), 4u);
  for (const auto& [rank, texts] : labels)
    EXPECT_EQ(texts, QStringList{QString("rank %1").arg(rank)});
  EXPECT_EQ(op_caption(*planned, 3, 2).find("group"), std::string::npos);
}

TEST(TensorParallel, TensorParallelCollectiveDrawsTheTensorParallelGroup) {
  const auto planned = plan_settings(tp_settings(true));
  const Plan& plan = planned->plan;
  const std::int64_t tp_op = first_collective(plan, ProcessGroup::Tensor);
  ASSERT_GE(tp_op, 0);
  QGraphicsScene scene;
  const RankLayout layout = build_rank_scene(scene, *planned, tp_op, 5, RankViewOptions{});
  EXPECT_EQ(layout.group, ProcessGroup::Tensor);
  EXPECT_EQ(column_ranks(layout), (std::vector<int>{4, 5}));
  EXPECT_EQ(rank_labels(scene).at(4), (QStringList{"(tp 0, dp 2)", "rank 4"}));
  // Two arrows (line and head each) per rank of the group, and the bus.
  std::map<int, int> arrows;
  for (QGraphicsItem* item : items_with_role(scene, ItemRole::Transfer))
    ++arrows[data_int(item, item_key::Rank)];
  EXPECT_EQ(arrows, (std::map<int, int>{{-1, 1}, {4, 4}, {5, 4}}));
  // The memory drawn is still the schedule's, owned by the group's data-parallel index (2).
  double drawn = 0;
  for (QGraphicsItem* item : items_with_role(scene, ItemRole::Block)) {
    if (data_int(item, item_key::Rank) != 5) continue;
    drawn += height_of(item);
    const auto component = Component(data_int(item, item_key::Component));
    if (sharing_of(component) == Sharing::Partitioned) {
      EXPECT_EQ(data_int(item, item_key::Owner), 2) << to_string(component);
    }
  }
  Bytes total = 0;
  for (Bytes b : planned->state_at(tp_op)[std::size_t(Device::Gpu)]) total += b;
  EXPECT_NEAR(drawn, double(total) * layout.pixels_per_byte[0], 1e-6);
  const std::string caption = op_caption(*planned, tp_op, 5);
  EXPECT_NE(caption.find("each of the 2 ranks of its tensor-parallel group (ranks 4-5)"),
            std::string::npos)
      << caption;

  // A ZeRO collective of the same plan: rank 5's data-parallel group again.
  const std::int64_t dp_op = first_collective(plan, ProcessGroup::Data);
  ASSERT_GE(dp_op, 0);
  const RankLayout data = build_rank_scene(scene, *planned, dp_op, 5, RankViewOptions{});
  EXPECT_EQ(data.group, ProcessGroup::Data);
  EXPECT_EQ(column_ranks(data), (std::vector<int>{1, 3, 5, 7}));
  const std::string words = op_caption(*planned, dp_op, 5);
  EXPECT_NE(words.find("each of the 4 ranks of its data-parallel group (ranks 1, 3, 5, 7)"),
            std::string::npos)
      << words;
  // The frame holds the wider group whichever is drawn, so the view does not jump.
  QGraphicsScene tensor_scene;
  build_rank_scene(tensor_scene, *planned, tp_op, 5, RankViewOptions{});
  EXPECT_EQ(tensor_scene.sceneRect().width(), scene.sceneRect().width());
}

TEST(TensorParallel, ARankOfAnyGroupCanBeSelected) {
  Session session(tp_settings());
  ASSERT_TRUE(session.apply(tp_settings()));
  EXPECT_EQ(session.world_size(), 8);
  session.select_rank(7);
  EXPECT_EQ(session.selected_rank(), 7);
  session.select_rank(12);
  EXPECT_EQ(session.selected_rank(), 7);
}

// A TP trace's ranks are a data-parallel group: the timeline's rows name the global ranks of the
// selected rank's TP index (rank 5 of TP 2 x DP 4 is tp 1 of dp 2: its group is ranks 1, 3, 5, 7)
// with their coordinates, as the rank view does; the tooltips too.
TEST(TensorParallel, TimelineRowsNameGlobalRanksAndTheirCoordinates) {
  MainWindow window(tp_settings(), false);
  window.resize(1400, 900);
  window.show_view(View::Timeline);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  window.session().select_rank(5);
  window.timeline().ranks().setValue(4);
  TimelineView& view = window.timeline().view();
  std::vector<QString> compute_rows;
  for (const QString& row : view.timeline_items().rows)
    if (row.endsWith(" compute")) compute_rows.push_back(row);
  EXPECT_EQ(compute_rows,
            (std::vector<QString>{"rank 1 (tp 1, dp 0) compute", "rank 3 (tp 1, dp 1) compute",
                                  "rank 5 (tp 1, dp 2) compute", "rank 7 (tp 1, dp 3) compute"}));
  for (const auto& [index, items] : view.timeline_items().by_index)
    for (auto* item : items)
      if (item->data(item_key::Ops).toInt() == 1 && item->data(item_key::Rank).toInt() == 2) {
        EXPECT_TRUE(item->toolTip().contains("rank 5 (tp 1, dp 2)"))
            << item->toolTip().toStdString();
      }
  // Labels fit their column.
  for (QGraphicsItem* label : items_with_role(*view.scene(), ItemRole::RowLabel))
    EXPECT_LT(label->sceneBoundingRect().right(), view.timeline_items().label_width - 4);
  window.session().select_rank(0);
  EXPECT_EQ(view.timeline_items().rows.front(), "rank 0 (tp 0, dp 0) compute");
}

TEST(TensorParallel, TimelineGivesTheTpStreamItsOwnRowInItsColour) {
  const auto planned = plan_settings(tp_settings(true));
  QGraphicsScene scene;
  TimelineGeometry geometry;
  geometry.pixels_per_second = 1e6;
  const TimelineItems items = build_timeline_scene(scene, planned->predicted, geometry);
  const auto compute = std::find(items.rows.begin(), items.rows.end(), "rank 0 compute");
  ASSERT_NE(compute, items.rows.end());
  ASSERT_NE(compute + 1, items.rows.end());
  EXPECT_EQ(*(compute + 1), "rank 0 tp");
  const std::int64_t tp_op = first_collective(planned->plan, ProcessGroup::Tensor);
  const Op& op = planned->plan.schedule.ops[std::size_t(tp_op)];
  const auto rank0 = [&](std::int64_t index) {
    for (QGraphicsRectItem* item : items.by_index.at(index)) {
      if (data_int(item, item_key::Rank) == 0) return item;
    }
    return static_cast<QGraphicsRectItem*>(nullptr);
  };
  QGraphicsRectItem* drawn = rank0(tp_op);
  ASSERT_NE(drawn, nullptr);
  const QColor colour = drawn->brush().color();
  EXPECT_EQ(colour, op_colour(to_string(op.kind), "tp"));
  EXPECT_NE(colour, op_colour(to_string(op.kind)));  // apart from ZeRO's collectives
  // On the row under rank 0's compute row.
  const auto& ops = planned->plan.schedule.ops;
  const auto compute_op =
      std::find_if(ops.begin(), ops.end(), [](const Op& o) { return o.stream == Stream::Compute; });
  ASSERT_NE(compute_op, ops.end());
  EXPECT_NEAR(drawn->rect().top(),
              rank0(compute_op - ops.begin())->rect().top() + geometry.row_height, 1e-9);
}

TEST(TensorParallel, CommandLineSetsTensorAndSequenceParallelism) {
  const CommandLine line = parse_command_line(args(
      {"-m", "gpt2-tiny", "--gpus", "8", "--tp", "2", "--sp", "true", "-s", "1", "-p", "bf16"}));
  EXPECT_EQ(line.settings.gpus, 8);
  const auto planned = plan_settings(line.settings);
  const ScheduleContext& c = planned->plan.schedule.context;
  EXPECT_EQ(c.tensor_parallel, 2);
  EXPECT_TRUE(c.sequence_parallel);
  EXPECT_EQ(c.dp_size, 4);
  EXPECT_EQ(c.stage, 1);
  EXPECT_EQ(c.precision, Precision::Bf16);
  EXPECT_EQ(planned->plan.request.model.name, "gpt2-tiny");
}

TEST(TensorParallel, BadTensorParallelFlagsNameTheFlag) {
  const std::vector<std::pair<QStringList, std::string>> cases = {
      {args({"--tp", "0"}), "--tp: must be between 1 and 4096"},
      {args({"--tp", "two"}), "--tp: expected an integer"},
      {args({"--sp", "maybe"}), "--sp: expected true or false"},
      {args({"--gpus", "6", "--tp", "4"}), "--gpus: 6 GPUs do not split"},
      {args({"--tp", "3"}), "--tp: 8 GPUs do not split into model-parallel groups of 3"},
      {args({"--tp", "2", "--pp", "3"}),
       "--pp: 8 GPUs do not split into model-parallel groups of 6"},
      {args({"--pipeline-schedule", "zigzag"}), "--pipeline-schedule"}};
  expect_refused(cases);
}

// Pipeline parallelism from the command line and the panel: the views plan the stage with the most
// GPU memory, the status names it and its layers, the timeline's legend names the bubbles.
TEST(TensorParallel, PipelineStagesFromTheFlagsAndThePanel) {
  const CommandLine line =
      parse_command_line(args({"--model", "gpt2-1.5b", "--gpus", "8", "--pp", "4", "--stage", "1",
                               "--precision", "bf16", "--grad-accum", "8"}));
  MainWindow window(line.settings, false);
  const auto& plan = window.session().planned()->plan;
  EXPECT_EQ(plan.schedule.context.pipeline_parallel, 4);
  EXPECT_EQ(plan.schedule.context.dp_size, 2);
  const QString status = window.config_panel().status().text();
  EXPECT_TRUE(status.contains(
      QString("Pipeline: 4 stages (1f1b); the views show stage %1").arg(plan.pipeline_stage)))
      << status.toStdString();
  EXPECT_TRUE(window.timeline().legend().text().contains("pipeline bubble"));
  EXPECT_EQ(window.config_panel().pipeline_parallel().value(), 4);
  // The titles count every GPU of the job (they counted the data-parallel ranks: "on 2 x").
  EXPECT_TRUE(window.windowTitle().contains("on 8 x")) << window.windowTitle().toStdString();
  EXPECT_TRUE(window.windowTitle().contains("pipeline 4")) << window.windowTitle().toStdString();
  EXPECT_TRUE(rank_view_title(*window.session().planned())
                  .contains(QString("on 8 x A100-SXM4-80GB (PP 4 (stage %1 shown) x DP 2)")
                                .arg(plan.pipeline_stage)))
      << rank_view_title(*window.session().planned()).toStdString();
  window.config_panel().pipeline_parallel().setValue(2);
  EXPECT_EQ(window.session().planned()->plan.schedule.context.dp_size, 4);
  window.config_panel().pipeline_parallel().setValue(1);
  EXPECT_FALSE(window.config_panel().status().text().contains("Pipeline"));
}

// Pipeline stages from a DeepSpeed config count in the titles too.
TEST(TensorParallel, PipelineStagesFromADeepSpeedConfigCountInTheTitles) {
  const std::string path =
      temp_file("pipeline_ds.json",
                R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4,
          "pipeline": {"stages": 2}, "zero_optimization": {"stage": 1}})");
  const CommandLine line =
      parse_command_line(args({"--deepspeed-config", path.c_str(), "--gpus", "8"}));
  MainWindow window(line.settings, false);
  ASSERT_EQ(window.session().planned()->plan.schedule.context.pipeline_parallel, 2);
  EXPECT_TRUE(window.windowTitle().contains("on 8 x")) << window.windowTitle().toStdString();
  EXPECT_TRUE(rank_view_title(*window.session().planned()).contains(" on 8 x "))
      << rank_view_title(*window.session().planned()).toStdString();
}

TEST(TensorParallel, PanelControlsReplan) {
  MainWindow window(walkthrough_settings(), false);
  window.config_panel().gpus().setValue(8);
  EXPECT_FALSE(window.config_panel().sequence_parallel().isEnabled());
  window.config_panel().tensor_parallel().setValue(2);
  const auto context = [&] { return window.session().planned()->plan.schedule.context; };
  EXPECT_EQ(context().tensor_parallel, 2);
  EXPECT_EQ(context().dp_size, 4);
  EXPECT_FALSE(context().sequence_parallel);
  EXPECT_TRUE(window.config_panel().sequence_parallel().isEnabled());
  window.config_panel().sequence_parallel().setChecked(true);
  EXPECT_TRUE(context().sequence_parallel);
  EXPECT_TRUE(window.config_panel().status().text().contains(
      "tensor parallel 2 with sequence parallelism x data parallel 4"))
      << window.config_panel().status().text().toStdString();
  // 8 GPUs do not split into groups of 3: the panel names the problem, the plan stays.
  window.config_panel().tensor_parallel().setValue(3);
  EXPECT_TRUE(window.session().error().contains("groups of 3"))
      << window.session().error().toStdString();
  EXPECT_EQ(context().tensor_parallel, 2);
  window.config_panel().tensor_parallel().setValue(1);
  EXPECT_TRUE(window.session().error().isEmpty());
  EXPECT_EQ(context().dp_size, 8);
}

TEST(TensorParallel, ConfigRoundTripKeepsTensorAndSequenceParallelism) {
  const Settings settings = tp_settings(true);
  const nlohmann::json document = settings_to_json(settings);
  EXPECT_EQ(document["gpus"], 8);
  EXPECT_EQ(document["deepspeed"]["tensor_parallel"]["autotp_size"], 2);
  EXPECT_EQ(document["deepspeed"]["tensor_parallel"]["sequence_parallel"], true);
  const std::string path = temp_file("tp_config.json");
  write_text_file(path, document.dump(2));
  Diagnostics diagnostics;
  const Settings read = read_config_file(path, default_settings(), diagnostics);
  EXPECT_EQ(read.gpus, 8);
  EXPECT_EQ(read.config.tensor_parallel.size, 2);
  EXPECT_TRUE(read.config.tensor_parallel.sequence_parallel);
  EXPECT_TRUE(diagnostics.warnings.empty());
  const auto planned = plan_settings(read);
  EXPECT_EQ(planned->plan.schedule.context.dp_size, 4);
  EXPECT_EQ(planned->plan.schedule.ops.size(), plan_settings(settings)->plan.schedule.ops.size());
}

// A trace records the data-parallel size; the GUI's GPUs count every rank. (Re-planning a TP trace
// end to end needs the model's transformer shape, which a trace's inputs do not record yet.)
TEST(TensorParallel, TraceSettingsCountEveryRank) {
  const auto planned = plan_settings(tp_settings(true));
  const Trace trace = trace_from_json(trace_to_json(planned->predicted));
  ASSERT_EQ(trace.run.dp_size, 4);
  std::vector<std::string> notes;
  const Settings settings = settings_for_trace(default_settings(), trace.run, notes);
  EXPECT_EQ(settings.config.tensor_parallel.size, 2);
  EXPECT_TRUE(settings.config.tensor_parallel.sequence_parallel);
  EXPECT_EQ(settings.gpus, 8);
  EXPECT_EQ(data_parallel_size(settings), 4);
  // A trace without its inputs ran without TP (the executor refuses --tp): the GUI's TP size
  // does not carry over.
  TraceRun bare = trace.run;
  bare.inputs.reset();
  const Settings plain = settings_for_trace(tp_settings(), bare, notes);
  EXPECT_EQ(plain.config.tensor_parallel.size, 1);
  EXPECT_EQ(plain.gpus, 4);
}

TEST(TensorParallel, TrafficChartListsBothGroupsCollectives) {
  MainWindow window(tp_settings(true), false);
  window.resize(1200, 800);
  window.show();
  window.show_view(View::Traffic);
  const auto axes = window.traffic().collectives().chart()->axes(Qt::Vertical);
  ASSERT_EQ(axes.size(), 1);
  const QStringList labels = static_cast<QBarCategoryAxis*>(axes.front())->categories();
  const CommReport& comm = window.session().planned()->plan.comm;
  int tp_rows = 0, dp_rows = 0;
  for (int k = 0; k < kOpKindCount; ++k) {
    tp_rows += comm.tensor_parallel[std::size_t(k)].calls > 0 ? 1 : 0;
    dp_rows += comm.collectives[std::size_t(k)].calls > 0 ? 1 : 0;
  }
  ASSERT_GT(tp_rows, 0);
  EXPECT_EQ(labels.filter(QRegularExpression("^tp ")).size(), tp_rows)
      << labels.join(", ").toStdString();
  EXPECT_EQ(labels.filter(QRegularExpression("^dp ")).size(), dp_rows)
      << labels.join(", ").toStdString();
  const auto& gathers = comm.tensor_parallel[std::size_t(OpKind::AllGather)];
  EXPECT_TRUE(labels.contains(QString::fromUtf8("tp all_gather \u00d7%1").arg(gathers.calls)))
      << labels.join(", ").toStdString();
}

TEST(TensorParallel, HeadlessRendersATensorParallelRunAndRefusesABadSize) {
  const std::string path = temp_file("headless_tp.png");
  const GuiRun run =
      run_gui({"--model", "gpt2-tiny", "--gpus", "8", "--tp", "2", "--sp", "true", "--screenshot",
               QString::fromStdString(path), "--step", "1", "--size", "1000x650"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(QImage(QString::fromStdString(path)).size(), QSize(1000, 650));
  const GuiRun bad =
      run_gui({"--screenshot", QString::fromStdString(temp_file("never_tp.png")), "--tp", "0"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("--tp"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace zerolens::gui
