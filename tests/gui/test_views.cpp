// Every view renders for DP, each ZeRO stage and each offload variant, and shows what the plan
// holds: blocks per device in use, every op of the trace on the timeline, one memory chart per
// device in use, the collectives, and one bar per variant with the current one marked.
#include <gtest/gtest.h>

#include <QApplication>
#include <QBarCategoryAxis>
#include <QChart>
#include <QGraphicsTextItem>
#include <QLineSeries>
#include <QSet>
#include <QTest>
#include <algorithm>

#include "gui/main_window.hpp"
#include "gui/memory_chart.hpp"
#include "gui/trace_checks.hpp"
#include "gui_test_helpers.hpp"

namespace zerolens::gui {
namespace {

using testing::items_with_role;
using testing::variant_settings;

// A rendered view is more than a blank page: count its distinct colours.
int distinct_colours(QWidget& widget) {
  const QImage image = widget.grab().toImage();
  QSet<QRgb> colours;
  for (int y = 0; y < image.height(); y += 3) {
    for (int x = 0; x < image.width(); x += 3) colours.insert(image.pixel(x, y));
  }
  return int(colours.size());
}

bool device_used(const Plan& plan, Device device) {
  return plan.device(device).peak > 0;
}

void expect_rank_view(MainWindow& window, const Plan& plan) {
  const RankLayout& layout = window.ranks().view().layout();
  EXPECT_EQ(layout.columns.size(), 4u);
  for (Device d : {Device::Cpu, Device::Nvme})
    EXPECT_EQ(layout.devices[std::size_t(d)], device_used(plan, d)) << to_string(d);
  EXPECT_FALSE(items_with_role(*window.ranks().view().scene(), ItemRole::Block).empty());
}

// Every op of the ranks shown (one by default: a prediction's ranks are identical) is drawn.
void expect_timeline(MainWindow& window, const Planned& planned) {
  std::size_t drawn = 0;
  for (const auto& [index, items] : window.timeline().view().timeline_items().by_index)
    drawn += items.size();
  const int shown = window.timeline().view().max_ranks();
  EXPECT_EQ(shown, 1);
  const auto& ranks = planned.predicted.ranks;
  const std::vector<int> first(ranks.begin(),
                               ranks.begin() + std::min<std::ptrdiff_t>(shown, std::ssize(ranks)));
  std::size_t expected = 0;
  for (const auto& op : planned.predicted.ops)
    expected += std::find(first.begin(), first.end(), op.rank) != first.end() ? 1 : 0;
  EXPECT_EQ(drawn, expected);
}

void expect_memory(MainWindow& window, const Plan& plan) {
  const std::size_t devices =
      1 + (device_used(plan, Device::Cpu) ? 1 : 0) + (device_used(plan, Device::Nvme) ? 1 : 0);
  EXPECT_EQ(window.memory().charts().size(), devices);
}

void expect_compare(MainWindow& window, const Plan& plan) {
  const auto& variants = window.compare().variants();
  ASSERT_EQ(variants.size(), standard_variants().size());
  int current = 0;
  for (const auto& v : variants) current += is_current_variant(v.variant, plan) ? 1 : 0;
  EXPECT_EQ(current, 1);
  const auto axes = window.compare().memory().chart()->axes(Qt::Vertical);
  ASSERT_EQ(axes.size(), 1);
  const QStringList labels = static_cast<QBarCategoryAxis*>(axes.front())->categories();
  EXPECT_EQ(labels.filter(QString::fromUtf8("\u25b6")).size(), 1);
}

// The Compare tab's charts name each variant in a 1400 x 880 window (Qt Charts drew every label
// of a column as "..." when its rows were too short for them: the two smaller charts' at 17 pixels
// a row, the main chart's under the walkthrough's four-line seed caption); they get a small font,
// the smaller charts short labels and the room of even rows.
TEST(Views, CompareChartsNameEveryVariant) {
  EXPECT_EQ(short_variant_label("ZeRO-3 + opt:nvme + param:nvme"), "Z3 o:nvme p:nvme");
  for (const bool walkthrough : {false, true}) {
    MainWindow window(walkthrough ? walkthrough_settings()
                                  : testing::llama_on_64(OffloadDevice::None, OffloadDevice::None),
                      false);
    if (walkthrough) window.step_bar().show_seed_step(20);
    window.resize(1400, 880);
    window.show_view(View::Compare);
    window.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
    QApplication::processEvents();
    for (QChartView* view :
         {&window.compare().memory(), &window.compare().host(), &window.compare().traffic()}) {
      QStringList drawn;
      for (QGraphicsItem* item : view->scene()->items())
        if (auto* text = dynamic_cast<QGraphicsTextItem*>(item)) drawn << text->toPlainText();
      const QString all = drawn.join(" | ");
      for (const Variant& variant : standard_variants()) {
        const QString label = view == &window.compare().memory()
                                  ? QString::fromStdString(variant.label)
                                  : short_variant_label(variant.label);
        EXPECT_TRUE(std::any_of(drawn.begin(), drawn.end(),
                                [&](const QString& text) {
                                  return text == label || text.startsWith(label + " (") ||
                                         text.endsWith(QString::fromUtf8("\u25b6 ") + label) ||
                                         text.contains(QString::fromUtf8("\u25b6 ") + label + " (");
                                }))
            << label.toStdString() << " in " << all.toStdString();
      }
    }
  }
}

TEST(Views, EveryViewRendersForEveryVariant) {
  for (const Variant& variant : standard_variants()) {
    MainWindow window(variant_settings(variant), false);
    window.resize(1200, 800);
    window.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
    const Planned& planned = *window.session().planned();
    window.session().set_step(planned.plan.device(Device::Gpu).peak_op);
    for (int v = 0; v < kViewCount; ++v) {
      window.show_view(View(v));
      EXPECT_GT(distinct_colours(window.view_widget(View(v))), 20)
          << variant.label << " " << to_string(View(v));
    }
    expect_rank_view(window, planned.plan);
    expect_timeline(window, planned);
    expect_memory(window, planned.plan);
    expect_compare(window, planned.plan);
  }
}

// The memory chart draws the simulated timeline's samples; the predicted trace's memory per op,
// in program order at the time each state holds, is the same curve by another path.
TEST(Views, MemoryCurveIsThePredictedTracesMemory) {
  const auto planned =
      plan_settings(variant_settings(standard_variants()[6]));  // ZeRO-3 + optimizer on CPU
  for (Device device : {Device::Gpu, Device::Cpu}) {
    Bytes before = 0;
    for (Bytes b : planned->states.front()[std::size_t(device)]) before += b;
    const auto from_trace = memory_steps(planned->predicted, 0, device, before);
    std::vector<QPointF> from_timeline;
    for (const auto& sample : planned->timeline.memory) {
      const double value = double(sample.bytes[std::size_t(device)]);
      if (!from_timeline.empty()) from_timeline.emplace_back(sample.time, from_timeline.back().y());
      from_timeline.emplace_back(sample.time, value);
    }
    ASSERT_EQ(from_trace.size(), from_timeline.size());
    for (std::size_t i = 0; i < from_trace.size(); ++i) {
      EXPECT_DOUBLE_EQ(from_trace[i].x(), from_timeline[i].x()) << i;
      EXPECT_DOUBLE_EQ(from_trace[i].y(), from_timeline[i].y()) << i;
    }
  }
}

TEST(Views, ChangingTheStageInThePanelReplans) {
  MainWindow window(default_settings(), false);
  EXPECT_EQ(window.session().planned()->plan.schedule.context.stage, 3);
  window.config_panel().stage().setCurrentIndex(1);
  const Plan& plan = window.session().planned()->plan;
  EXPECT_EQ(plan.schedule.context.stage, 1);
  EXPECT_EQ(plan.schedule.context.optimizer_device, OffloadDevice::Cpu);  // kept
  EXPECT_FALSE(window.config_panel().offload_param().isEnabled());
  window.config_panel().stage().setCurrentIndex(0);  // plain DP: no optimizer offload
  EXPECT_EQ(window.session().planned()->plan.schedule.context.optimizer_device,
            OffloadDevice::None);
  EXPECT_TRUE(window.session().error().isEmpty());
  window.config_panel().gpus().setValue(16);
  EXPECT_EQ(window.session().planned()->plan.schedule.context.dp_size, 16);
  EXPECT_TRUE(window.config_panel().status().text().contains("GPU peak"));
}

}  // namespace
}  // namespace zerolens::gui
