// The Compare tab's 3D layouts (issue 20): the job's GPUs split as tensor x pipeline x data
// parallel, each layout's GPU peak and step time drawn and named, the job's own marked, and the
// variants and layouts the planner refuses listed with its reason instead of failing the tab.
#include <gtest/gtest.h>

#include <QApplication>
#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QGraphicsTextItem>
#include <QHorizontalBarSeries>
#include <QTest>
#include <algorithm>

#include "gui/chart_util.hpp"
#include "gui/main_window.hpp"
#include "gui_test_helpers.hpp"

namespace zerolens::gui {
namespace {

const QString kCurrent = QString::fromUtf8("\u25b6 ");

// The walkthrough's gpt2-tiny (2 blocks, 4 heads) on 8 GPUs: pipeline 2 x data parallel 4, ZeRO-1.
Settings pipeline_settings() {
  Settings settings = walkthrough_settings();
  settings.gpus = 8;
  set_stage(settings, 1);
  set_pipeline_parallel(settings, 2);
  return settings;
}

QStringList drawn_texts(QChartView& view) {
  QStringList drawn;
  for (QGraphicsItem* item : view.scene()->items())
    if (auto* text = dynamic_cast<QGraphicsTextItem*>(item)) drawn << text->toPlainText();
  return drawn;
}

// The bars of a layout chart, top to bottom (the chart draws them reversed), and their labels.
struct Bars {
  QStringList labels;
  std::vector<double> values;
};
Bars bars_of(QChartView& view) {
  Bars bars;
  const auto axes = view.chart()->axes(Qt::Vertical);
  EXPECT_EQ(axes.size(), 1);
  if (axes.empty()) return bars;
  bars.labels = static_cast<QBarCategoryAxis*>(axes.front())->categories();
  std::reverse(bars.labels.begin(), bars.labels.end());
  for (QAbstractSeries* series : view.chart()->series()) {
    auto* bar_series = dynamic_cast<QHorizontalBarSeries*>(series);
    if (!bar_series) continue;
    const QBarSet* set = bar_series->barSets().front();
    for (int i = set->count() - 1; i >= 0; --i) bars.values.push_back(set->at(i));
  }
  return bars;
}

// Stages 2 and 3 are what DeepSpeed's pipeline engine refuses: the tab plans the other three
// variants, names the seven it left out with the planner's reason, and draws every 3D layout.
// The job's own layout is marked, and its bars are the session's own plan and timeline (a second
// path: the full prediction, where the layouts' step times extrapolate a few micro-steps).
TEST(CompareLayouts, APipelineJobListsWhatItLeavesOutAndDrawsEveryLayout) {
  MainWindow window(pipeline_settings(), false);
  window.resize(1400, 880);
  window.show_view(View::Compare);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  QApplication::processEvents();
  ComparePage& page = window.compare();
  QStringList planned;
  for (const auto& v : page.variants()) planned << QString::fromStdString(v.variant.label);
  EXPECT_EQ(planned, (QStringList{"DP", "ZeRO-1", "ZeRO-1 + opt:cpu"}));
  // One line per reason (stage 2's and stage 3's), naming each variant it leaves out.
  const QStringList lines = page.left_out().text().split('\n');
  ASSERT_EQ(page.comparison().left_out.size(), 7u);
  int stage_lines = 0;
  for (const QString& line : lines) {
    if (!line.contains("zero_optimization.stage")) continue;
    ++stage_lines;
    EXPECT_TRUE(line.startsWith("Left out: ZeRO-")) << line.toStdString();
  }
  EXPECT_EQ(stage_lines, 2);
  for (const auto& [variant, reason] : page.comparison().left_out) {
    const QString label = QString::fromStdString(variant.label);
    EXPECT_EQ(lines.filter(QString::fromStdString(reason)).filter(label).size(), 1)
        << variant.label;
  }
  for (const auto& [layout, reason] : page.layouts().left_out)
    EXPECT_EQ(lines.filter(QString::fromStdString(reason)).size(), 1) << reason;

  const Planned& job = *window.session().planned();
  const auto& layouts = page.layouts().layouts;
  ASSERT_GE(layouts.size(), 4u);  // tp 1, 2, 4 x pp 1, 2 on 8 GPUs, the 4 heads allowing
  const Bars memory = bars_of(page.layout_memory());
  const Bars time = bars_of(page.layout_time());
  ASSERT_EQ(std::size_t(memory.labels.size()), layouts.size());
  ASSERT_EQ(memory.values.size(), layouts.size());
  ASSERT_EQ(time.values.size(), layouts.size());
  EXPECT_EQ(memory.labels, time.labels);
  const ByteUnit unit = byte_unit_for(std::max(
      double(job.plan.device(Device::Gpu).capacity),
      double(std::max_element(layouts.begin(), layouts.end(), [](const auto& a, const auto& b) {
               return a.result.peak[0] < b.result.peak[0];
             })->result.peak[0])));
  int marked = 0;
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    const QString name = short_layout_label(layouts[i]);
    EXPECT_TRUE(memory.labels[int(i)].contains(name)) << name.toStdString();
    if (!memory.labels[int(i)].startsWith(kCurrent)) continue;
    ++marked;
    EXPECT_EQ(name, "pp2 dp4");
    EXPECT_NEAR(memory.values[i] * unit.bytes, double(job.plan.device(Device::Gpu).peak), 1.0);
    double slowest = 0;
    for (const auto& l : layouts) slowest = std::max(slowest, l.result.step_time);
    const double scale = slowest >= 1 ? 1 : 1e3;  // the chart's unit: s, or ms under a second
    EXPECT_NEAR(time.values[i] / scale, job.timeline.step_time, 1e-9 * job.timeline.step_time);
  }
  EXPECT_EQ(marked, 1);
  // Qt Charts elides a label its row cannot hold; each is drawn whole.
  for (QChartView* view : {&page.layout_memory(), &page.layout_time()}) {
    const QStringList drawn = drawn_texts(*view);
    for (const QString& label : memory.labels)
      EXPECT_TRUE(drawn.contains(label))
          << label.toStdString() << " in " << drawn.join(" | ").toStdString();
  }
}

// A job with nothing left out shows no list.
TEST(CompareLayouts, NothingLeftOutShowsNoList) {
  MainWindow window(walkthrough_settings(), false);
  window.resize(1400, 880);
  window.show_view(View::Compare);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  QApplication::processEvents();
  EXPECT_TRUE(window.compare().comparison().left_out.empty());
  EXPECT_TRUE(window.compare().layouts().left_out.empty());
  EXPECT_FALSE(window.compare().left_out().isVisible());
  EXPECT_FALSE(window.compare().layouts().layouts.empty());
  // The ZeRO-3 job's pipeline layouts run ZeRO-1, and their labels say so without being elided.
  const Bars memory = bars_of(window.compare().layout_memory());
  EXPECT_TRUE(memory.labels.contains("tp2 pp2 dp1 (Z1)"))
      << memory.labels.join(" | ").toStdString();
  const QStringList drawn = drawn_texts(window.compare().layout_memory());
  for (const QString& label : memory.labels)
    EXPECT_TRUE(drawn.contains(label))
        << label.toStdString() << " in " << drawn.join(" | ").toStdString();
}

TEST(CompareLayouts, ShortLabelsKeepEverySize) {
  LayoutPlan layout;
  layout.result.point.layout = {.tensor = 2,
                                .pipeline = 4,
                                .virtual_stages = 2,
                                .sequence_parallel = true,
                                .data = 16,
                                .expert = 1};
  layout.stage_lowered = true;
  EXPECT_EQ(layout.label(), "tp 2 sp x pp 4 v 2 x dp 16 (ZeRO-1)");
  EXPECT_EQ(short_layout_label(layout), "tp2 sp pp4 v2 dp16 (Z1)");
}

}  // namespace
}  // namespace zerolens::gui
