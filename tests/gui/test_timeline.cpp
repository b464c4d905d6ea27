// The timeline's scene at a zoom where ops are narrower than a pixel (LLaMA-2 7B, ZeRO-3 on 64
// GPUs: 33 forward all-gathers in the first 1 % of the step): every op is drawn, once, at least two
// pixels wide, narrow neighbours merged; the exposed lane adds up to the trace's exposed figures;
// the legend names every kind the trace has.
#include <gtest/gtest.h>

#include <QGraphicsScene>
#include <QGraphicsSimpleTextItem>
#include <QScrollBar>
#include <QTest>
#include <map>
#include <set>

#include "gui/main_window.hpp"
#include "gui/session.hpp"
#include "gui/settings.hpp"
#include "gui/timeline_scene.hpp"
#include "gui_test_helpers.hpp"

namespace zerolens::gui {
namespace {

using testing::items_with_role;

std::unique_ptr<Planned> llama_on_64() {
  return plan_settings(
      testing::llama_on_64(OffloadDevice::Cpu, OffloadDevice::None));  // exposed offload too
}

TimelineGeometry fit_to(double pixels, const Trace& trace) {
  TimelineGeometry geometry;
  geometry.pixels_per_second = pixels / trace_end_time(trace);
  return geometry;
}

TEST(Timeline, EveryOpIsDrawnOnceAndNoneNarrowerThanTwoPixels) {
  const auto planned = llama_on_64();
  const Trace& trace = planned->predicted;
  QGraphicsScene scene;
  const TimelineItems items = build_timeline_scene(scene, trace, fit_to(1000, trace));
  std::map<int, std::int64_t> drawn, in_trace;  // ops per rank
  int merged = 0;
  for (QGraphicsItem* item : items_with_role(scene, ItemRole::Op)) {
    const auto* rect = static_cast<QGraphicsRectItem*>(item);
    EXPECT_GE(rect->rect().width(), 2.0);
    const int ops = item->data(item_key::Ops).toInt();
    drawn[item->data(item_key::Rank).toInt()] += ops;
    if (ops > 1) {
      ++merged;
      EXPECT_TRUE(rect->toolTip().startsWith(QString("%1 ops, merged").arg(ops)))
          << rect->toolTip().toStdString();
    }
  }
  std::set<int> ranks;
  for (const auto& [index, drawn_items] : items.by_index)
    for (auto* item : drawn_items) ranks.insert(item->data(item_key::Rank).toInt());
  for (const auto& op : trace.ops)
    if (ranks.count(op.rank)) ++in_trace[op.rank];
  EXPECT_EQ(drawn, in_trace);
  EXPECT_GT(merged, 0) << "at 1000 pixels for 19 s some ops must merge";
  // Zoomed in far enough, the first all-gathers stand apart.
  QGraphicsScene zoomed;
  build_timeline_scene(zoomed, trace, fit_to(1e7, trace));
  for (QGraphicsItem* item : items_with_role(zoomed, ItemRole::Op)) {
    const auto* rect = static_cast<QGraphicsRectItem*>(item);
    if (rect->rect().left() < TimelineGeometry{}.label_width + 1e7 * 0.01) {
      EXPECT_EQ(item->data(item_key::Ops).toInt(), 1);
    }
  }
}

TEST(Timeline, ExposedLaneAddsUpToTheTracesExposedTime) {
  const auto planned = llama_on_64();
  const Trace& trace = planned->predicted;
  ASSERT_GT(trace.summary.exposed_offload, 0);
  QGraphicsScene scene;
  const TimelineItems items = build_timeline_scene(scene, trace, fit_to(1000, trace));
  EXPECT_NE(std::find(items.rows.begin(), items.rows.end(), "rank 0 exposed"), items.rows.end());
  std::map<int, double> seconds;
  for (QGraphicsItem* item : items_with_role(scene, ItemRole::Exposed))
    seconds[item->data(item_key::Rank).toInt()] += item->data(item_key::Seconds).toDouble();
  const double expected = trace.summary.exposed_communication + trace.summary.exposed_offload;
  ASSERT_FALSE(seconds.empty());
  for (const auto& [rank, total] : seconds)
    EXPECT_NEAR(total, expected, 1e-9 * trace.summary.step_time) << rank;
}

TEST(Timeline, LegendNamesEveryKindOfTheTrace) {
  const auto planned = llama_on_64();
  const QString legend = timeline_legend(planned->predicted);
  std::set<std::string> kinds;
  for (const auto& op : planned->predicted.ops) kinds.insert(op.kind);
  for (const auto& kind : kinds) EXPECT_TRUE(legend.contains(QString::fromStdString(kind))) << kind;
  EXPECT_TRUE(legend.contains("exposed offload"));
}

// Filter, keys and ranks: ops of other kinds and layers fade; W/S zoom and A/D pan as in Perfetto;
// a prediction shows one rank (its ranks are identical), a loaded trace each of its ranks.
TEST(Timeline, FilterKeysAndRanksShown) {
  MainWindow window(walkthrough_settings(), false);
  window.resize(1400, 900);
  window.show_view(View::Timeline);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  TimelineView& view = window.timeline().view();
  EXPECT_EQ(view.max_ranks(), 1);
  window.timeline().filter().setText("all_gather");
  const Trace& trace = *view.shown_trace();
  int bright = 0, faded = 0;
  for (const auto& op : trace.ops) {
    const auto found = view.timeline_items().by_index.find(op.index);
    if (found == view.timeline_items().by_index.end() || op.rank != trace.ranks.front()) continue;
    for (auto* item : found->second) {
      if (item->data(item_key::Ops).toInt() > 1) continue;  // merged: bright when any op matches
      if (op.kind == "all_gather") {
        EXPECT_DOUBLE_EQ(item->opacity(), 1.0);
        ++bright;
      } else {
        EXPECT_LT(item->opacity(), 0.5) << op.kind;
        ++faded;
      }
    }
  }
  EXPECT_GT(bright, 0);
  EXPECT_GT(faded, 0);
  // It counts what it keeps, and Enter takes the cursor to the next of them.
  std::vector<std::int64_t> gathers;
  const auto& ops = window.session().planned()->plan.schedule.ops;
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == OpKind::AllGather) gathers.push_back(std::int64_t(i));
  EXPECT_EQ(window.timeline().filter_matches().text(),
            QString("%1 ops (Enter: next)").arg(gathers.size()));
  QTest::keyClick(&window.timeline().filter(), Qt::Key_Return);
  EXPECT_EQ(window.session().step(), gathers[0]);
  QTest::keyClick(&window.timeline().filter(), Qt::Key_Return);
  EXPECT_EQ(window.session().step(), gathers[1]);
  window.timeline().filter().setText("no such layer");
  EXPECT_EQ(window.timeline().filter_matches().text(), "no op matches");
  window.timeline().filter().clear();
  view.setFocus();
  const double zoom = view.zoom_factor();
  QTest::keyClick(&view, Qt::Key_W);
  EXPECT_DOUBLE_EQ(view.zoom_factor(), zoom * 1.5);
  view.horizontalScrollBar()->setValue(0);  // from the left edge: D pans right, A back
  const int before = view.horizontalScrollBar()->value();
  QTest::keyClick(&view, Qt::Key_D);
  EXPECT_GT(view.horizontalScrollBar()->value(), before);
  QTest::keyClick(&view, Qt::Key_A);
  EXPECT_EQ(view.horizontalScrollBar()->value(), before);
  QTest::keyClick(&view, Qt::Key_S);
  EXPECT_NEAR(view.zoom_factor(), zoom, 1e-12);
  // A trace opened from a file shows each of its ranks.
  const std::string path = testing::temp_file("timeline_ranks.json");
  ASSERT_TRUE(window.save_trace_file(QString::fromStdString(path)));
  ASSERT_TRUE(window.open_trace_file(QString::fromStdString(path)))
      << window.last_error().toStdString();
  EXPECT_EQ(view.max_ranks(), int(window.session().loaded()->trace.ranks.size()));
  EXPECT_GT(view.max_ranks(), 1);
}

// The rows' names stay at the left edge when the chart scrolls sideways (Perfetto's track names),
// on an opaque column drawn over the ops.
TEST(Timeline, RowLabelsStayInViewWhenTheChartScrolls) {
  MainWindow window(testing::llama_on_64(OffloadDevice::Cpu, OffloadDevice::None), false);
  window.resize(1400, 900);
  window.show_view(View::Timeline);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  TimelineView& view = window.timeline().view();
  view.zoom(8);
  QScrollBar& bar = *view.horizontalScrollBar();
  for (const int value : {bar.maximum(), bar.maximum() / 2, 0}) {
    bar.setValue(value);
    const QRectF visible = view.mapToScene(view.viewport()->rect()).boundingRect();
    const auto labels = items_with_role(*view.scene(), ItemRole::RowLabel);
    ASSERT_EQ(labels.size(), view.timeline_items().rows.size());
    for (QGraphicsItem* label : labels) {
      const QRectF box = label->sceneBoundingRect();
      EXPECT_TRUE(visible.contains(box)) << "scrolled to " << value << ": label at " << box.left()
                                         << ", view from " << visible.left();
      EXPECT_LT(box.left() - visible.left(), 20);
      EXPECT_GT(label->topLevelItem()->zValue(), 2) << "over the ops (the cursor's op: 2)";
    }
    // The time axis ticks what is shown, a tick about every 100 pixels at this zoom too, each
    // labelled apart.
    std::set<QString> ticks;
    for (QGraphicsItem* item : view.timeline_items().axis)
      if (auto* text = dynamic_cast<QGraphicsSimpleTextItem*>(item))
        if (visible.contains(text->sceneBoundingRect())) ticks.insert(text->text());
    EXPECT_GE(ticks.size(), std::size_t(visible.width() / 200)) << "scrolled to " << value;
  }
  EXPECT_GT(bar.maximum(), 1000) << "zoomed in: the chart is wider than the view";
}

// The step bar says why the op at the cursor happens (sim's op_reason), under what it does.
TEST(StepBar, SaysWhyTheOpHappens) {
  MainWindow window(walkthrough_settings(), false);
  window.session().set_step(0);  // the embedding's gather
  const QString caption = window.step_bar().caption();
  EXPECT_TRUE(caption.contains("all-gathers")) << caption.toStdString();
  EXPECT_TRUE(caption.contains("\nWhy: ZeRO-3 keeps 1/4 of each layer's parameters"))
      << caption.toStdString();
  window.session().set_step(-1);
  EXPECT_FALSE(window.step_bar().caption().contains("Why:"));
}

}  // namespace
}  // namespace zerolens::gui
