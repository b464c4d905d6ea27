// The memory chart's stack by category: its top is the predicted memory line at every moment (the
// replay's states summed by category against the timeline's samples, two routes to one figure);
// op_at_time worked by hand; a click on the chart moves the step cursor to that moment's op.
#include <gtest/gtest.h>

#include <QChartView>
#include <QTest>
#include <QValueAxis>

#include "gui/main_window.hpp"
#include "gui/memory_chart.hpp"
#include "gui/session.hpp"
#include "gui/settings.hpp"
#include "gui_test_helpers.hpp"

namespace zerolens::gui {
namespace {

Settings offloaded_llama() {
  return testing::llama_on_64(OffloadDevice::Cpu, OffloadDevice::None);
}

TEST(MemoryStack, TopIsThePredictedLine) {
  const auto planned = plan_settings(offloaded_llama());
  for (const Device device : {Device::Gpu, Device::Cpu}) {
    const auto stack = category_stack(*planned, device);
    ASSERT_GE(stack.size(), 2u) << "several categories stacked";
    const auto& top = stack.back().second;
    const auto& samples = planned->timeline.memory;
    ASSERT_EQ(top.size(), 2 * samples.size() - 1);
    for (std::size_t k = 0; k < samples.size(); ++k) {
      const QPointF& point = top[k == 0 ? 0 : 2 * k];
      EXPECT_DOUBLE_EQ(point.x(), samples[k].time) << k;
      EXPECT_DOUBLE_EQ(point.y(), double(samples[k].bytes[std::size_t(device)])) << k;
    }
    for (std::size_t c = 1; c < stack.size(); ++c)
      for (std::size_t i = 0; i < top.size(); ++i)
        EXPECT_GE(stack[c].second[i].y(), stack[c - 1].second[i].y());
  }
}

// The walkthrough's chart stacks what its rank view shows, the model states and their transient
// copies (its CUDA context and workspaces, 805 MB of 806, left the states a line on the floor): the
// stack's top is the shown components' bytes of each state (summed here from the states
// themselves), and the y axis spans them, rounded up.
TEST(MemoryStack, WalkthroughStacksTheModelStatesItsRankViewShows) {
  MainWindow window(walkthrough_settings(), false);
  window.resize(1400, 900);
  window.show_view(View::Memory);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  EXPECT_EQ(window.memory().show(), ShowMemory::StatesAndCopies);
  const Planned& planned = *window.session().planned();
  const auto stack = category_stack(planned, Device::Gpu, ShowMemory::StatesAndCopies);
  ASSERT_FALSE(stack.empty());
  const auto& top = stack.back().second;
  ASSERT_EQ(top.size(), 2 * planned.states.size() - 1);
  double highest = 0;
  for (std::size_t k = 0; k < planned.states.size(); ++k) {
    Bytes shown = 0;
    for (int c = 0; c < kComponentCount; ++c)
      if (shows(ShowMemory::StatesAndCopies, Component(c)))
        shown += planned.states[k][std::size_t(Device::Gpu)][std::size_t(c)];
    EXPECT_DOUBLE_EQ(top[2 * k].y(), double(shown)) << k;
    highest = std::max(highest, double(shown));
  }
  for (const auto& [category, points] : stack)
    EXPECT_NE(category, Category::Overhead) << "the CUDA context is not a model state";
  auto* y = static_cast<QValueAxis*>(
      window.memory().charts().front()->chart()->axes(Qt::Vertical).front());
  const double unit = y->titleText() == "kB" ? 1e3 : y->titleText() == "MB" ? 1e6 : 1;
  EXPECT_GE(y->max() * unit, highest);
  EXPECT_LT(y->max() * unit, 2 * highest) << "rounded up, not to the 806 MB of all memory";
}

TEST(MemoryStack, OpAtTimeWorkedByHand) {
  Timeline timeline;
  timeline.ops = {{0, 1}, {0.5, 2}, {1, 0.5}};  // ends 1, 2.5, 1.5
  EXPECT_EQ(op_at_time(timeline, 0.9), -1);
  EXPECT_EQ(op_at_time(timeline, 1.0), 0);
  EXPECT_EQ(op_at_time(timeline, 2.0), 2);
  EXPECT_EQ(op_at_time(timeline, 9.0), 1);
}

TEST(MemoryStack, ClickMovesTheCursorToThatMomentsOp) {
  MainWindow window(offloaded_llama(), false);
  window.resize(1400, 900);
  window.show_view(View::Memory);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  QChartView* view = window.memory().charts().front();
  const Timeline& timeline = window.session().planned()->timeline;
  const double seconds = timeline.ops.at(40).end() + 1e-9;
  const double scale = view->chart()->property("time_scale").toDouble();
  const QPointF in_chart = view->chart()->mapToPosition(QPointF(seconds * scale, 0));
  const QPoint at = view->mapFromScene(view->chart()->mapToScene(in_chart)) + QPoint(0, -20);
  QTest::mouseClick(view->viewport(), Qt::LeftButton, {}, at);
  const std::int64_t step = window.session().step();
  ASSERT_GE(step, 0);
  // The pixel rounds the time: the op found ends within a pixel's worth of seconds of op 40's end.
  const auto* axis = qobject_cast<QValueAxis*>(view->chart()->axes(Qt::Horizontal).front());
  ASSERT_NE(axis, nullptr);
  const double pixel = (axis->max() - axis->min()) / view->chart()->plotArea().width() / scale;
  ASSERT_GT(pixel, 0);
  ASSERT_LT(pixel, 0.1 * timeline.step_time);
  EXPECT_NEAR(timeline.ops.at(std::size_t(step)).end(), timeline.ops.at(40).end(),
              2 * pixel + 1e-9);
}

// The largest allocations at the GPU's peak: sorted, the whole list adding up to the peak, and
// shown in the memory tab with the peak's op.
TEST(MemoryStack, TopAllocationsAtThePeak) {
  MainWindow window(offloaded_llama(), false);
  const Plan& plan = window.session().planned()->plan;
  const auto all = top_allocations(plan, Device::Gpu, std::size_t(kComponentCount));
  Bytes total = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    total += all[i].second;
    if (i > 0) {
      EXPECT_GE(all[i - 1].second, all[i].second);
    }
  }
  EXPECT_EQ(total, plan.device(Device::Gpu).peak);
  const auto top = top_allocations(plan, Device::Gpu, 3);
  ASSERT_EQ(top.size(), 3u);
  window.show_view(View::Memory);
  window.memory().charts();  // built
  const QString text = window.memory().peak_allocations().text();
  EXPECT_TRUE(text.contains(QString("op %1").arg(plan.device(Device::Gpu).peak_op + 1)))
      << text.toStdString();
  EXPECT_TRUE(text.contains(to_string(top.front().first))) << text.toStdString();
}

}  // namespace
}  // namespace zerolens::gui
