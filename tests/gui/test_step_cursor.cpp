// The step cursor: it reaches every op (buttons, keys, the slider), names each op as the schedule
// describes it, finds the walkthrough's key moments in order, plays to the end, and stays in sync
// with the timeline both ways.
#include <gtest/gtest.h>
#include <QApplication>
#include <QElapsedTimer>
#include <QScrollBar>
#include <QTest>

#include "gui/main_window.hpp"
#include "gui_test_helpers.hpp"

namespace zerolens::gui {
namespace {

TEST(StepCursor, ReachesEveryOpAndNamesIt) {
  MainWindow window(walkthrough_settings(), false);
  Session& session = window.session();
  const Plan& plan = session.planned()->plan;
  const auto ops = std::int64_t(plan.schedule.ops.size());
  ASSERT_EQ(session.step(), -1);
  for (std::int64_t i = 0; i < ops; ++i) {
    window.step_bar().step_by(1);
    ASSERT_EQ(session.step(), i);
    EXPECT_EQ(window.step_bar().slider().value(), i);
    EXPECT_TRUE(window.step_bar().caption().contains(
        QString::fromStdString(plan.schedule.describe(std::size_t(i), plan.request.model, 0))))
        << window.step_bar().caption().toStdString();
  }
  window.step_bar().step_by(1);
  EXPECT_EQ(session.step(), ops - 1);  // stays on the last op
  window.step_bar().slider().setValue(7);
  EXPECT_EQ(session.step(), 7);
  window.step_bar().step_by(-100);
  EXPECT_EQ(session.step(), -1);
}

TEST(StepCursor, SelectedRankNamesTheOp) {
  MainWindow window(walkthrough_settings(), false);
  window.session().set_step(0);
  window.session().select_rank(2);
  EXPECT_TRUE(window.step_bar().caption().contains("rank 2 all-gathers"))
      << window.step_bar().caption().toStdString();
}

TEST(StepCursor, KeysMoveTheCursor) {
  MainWindow window(walkthrough_settings(), false);
  window.show();
  QApplication::setActiveWindow(&window);
  ASSERT_TRUE(QTest::qWaitForWindowActive(&window));
  Session& session = window.session();
  QTest::keyClick(&window, Qt::Key_Right);
  QTest::keyClick(&window, Qt::Key_Right);
  EXPECT_EQ(session.step(), 1);
  QTest::keyClick(&window, Qt::Key_Left);
  EXPECT_EQ(session.step(), 0);
  QTest::keyClick(&window, Qt::Key_End);
  EXPECT_EQ(session.step(), session.op_count() - 1);
  QTest::keyClick(&window, Qt::Key_Home);
  EXPECT_EQ(session.step(), -1);
  QTest::keyClick(&window, Qt::Key_PageDown);
  EXPECT_EQ(session.step(), 9);
}

// Gather before release before the reduction of gradients before the owners' update, as in the
// walkthrough's pictures; each jump lands on an op of that kind.
TEST(StepCursor, WalkthroughKeyMomentsComeInOrder) {
  MainWindow window(walkthrough_settings(), false);
  Session& session = window.session();
  const auto& ops = session.planned()->plan.schedule.ops;
  std::vector<std::int64_t> at;
  for (Moment moment : {Moment::Gather, Moment::Release, Moment::Reduce, Moment::Update}) {
    window.step_bar().jump_to(moment);
    ASSERT_GE(session.step(), 0);
    EXPECT_TRUE(is_moment(ops[std::size_t(session.step())], moment)) << to_string(moment);
    at.push_back(session.step());
  }
  EXPECT_TRUE(std::is_sorted(at.begin(), at.end()));
  EXPECT_EQ(ops[std::size_t(at[2])].kind, OpKind::ReduceScatter);
  EXPECT_EQ(ops[std::size_t(at[3])].kind, OpKind::OptimizerStep);
  window.step_bar().jump_to(Moment::Peak);
  EXPECT_EQ(session.step(), session.planned()->plan.device(Device::Gpu).peak_op);
}

TEST(StepCursor, PlayRunsToTheLastOpAndStops) {
  MainWindow window(walkthrough_settings(), false);
  Session& session = window.session();
  session.set_step(session.op_count() - 4);
  window.step_bar().toggle_play();
  ASSERT_TRUE(window.step_bar().playing());
  QElapsedTimer clock;
  clock.start();
  while (window.step_bar().playing() && clock.elapsed() < 30000) QTest::qWait(20);
  EXPECT_FALSE(window.step_bar().playing());
  EXPECT_EQ(session.step(), session.op_count() - 1);
}

TEST(Timeline, ClickOnAnOpMovesTheCursorAndTheCursorHighlightsIt) {
  MainWindow window(walkthrough_settings(), false);
  window.resize(1400, 900);
  window.show_view(View::Timeline);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  window.timeline().ranks().setValue(4);  // the walkthrough's four ranks, not one for all
  TimelineView& view = window.timeline().view();
  const auto& items = view.timeline_items();
  // The first all-gather on rank 1's row.
  QGraphicsRectItem* target = nullptr;
  for (QGraphicsRectItem* item : items.by_index.at(3)) {
    if (item->data(item_key::Rank).toInt() == 1) target = item;
  }
  ASSERT_NE(target, nullptr);
  view.ensureVisible(target);
  const QPoint at = view.mapFromScene(target->sceneBoundingRect().center());
  QTest::mouseClick(view.viewport(), Qt::LeftButton, {}, at);
  EXPECT_EQ(window.session().step(), 3);
  window.session().set_step(20);
  for (QGraphicsRectItem* item : view.timeline_items().by_index.at(20))
    EXPECT_DOUBLE_EQ(item->pen().widthF(), 2.5);
  for (QGraphicsRectItem* item : view.timeline_items().by_index.at(3))
    EXPECT_LT(item->pen().widthF(), 1.0);
}

TEST(Timeline, ZoomWidensTheTimeAxis) {
  MainWindow window(walkthrough_settings(), false);
  window.resize(1400, 900);
  window.show_view(View::Timeline);
  window.show();
  TimelineView& view = window.timeline().view();
  const double label = TimelineGeometry{}.label_width;
  const double before = view.scene()->sceneRect().width() - label - 40;
  view.zoom(4);
  EXPECT_NEAR(view.scene()->sceneRect().width() - label - 40, 4 * before, 1e-6 * before);
  view.fit();
  EXPECT_NEAR(view.scene()->sceneRect().width() - label - 40, before, 1e-6 * before);
}

}  // namespace
}  // namespace zerolens::gui
