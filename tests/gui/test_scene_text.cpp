// No text over text: at every op of the walkthrough, in every variant, and of a larger job, no two
// of the rank view's and the timeline's text items overlap (the user saw "release embedbelease
// embed...", "freed" over "capacity 85.90 GB").
#include <gtest/gtest.h>

#include <QGraphicsScene>
#include <QGraphicsSimpleTextItem>
#include <QGraphicsTextItem>

#include "gui/rank_scene.hpp"
#include "gui/session.hpp"
#include "gui/settings.hpp"
#include "gui/timeline_scene.hpp"
#include "gui_test_helpers.hpp"
#include "sim/plan/variants.hpp"

namespace zerolens::gui {
namespace {

struct Text {
  QString words;
  QRectF box;
};

std::vector<Text> texts(const QGraphicsScene& scene) {
  std::vector<Text> found;
  for (QGraphicsItem* item : scene.items()) {
    if (!item->isVisible()) continue;
    if (auto* simple = dynamic_cast<QGraphicsSimpleTextItem*>(item)) {
      if (!simple->text().trimmed().isEmpty())
        found.push_back({simple->text(), simple->sceneBoundingRect()});
    } else if (auto* rich = dynamic_cast<QGraphicsTextItem*>(item)) {
      if (!rich->toPlainText().trimmed().isEmpty())
        found.push_back({rich->toPlainText(), rich->sceneBoundingRect()});
    }
  }
  return found;
}

// Pairs whose boxes overlap by more than a pixel each way (touching lines are fine).
std::vector<std::string> overlaps(const QGraphicsScene& scene) {
  const auto all = texts(scene);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < all.size(); ++i)
    for (std::size_t j = i + 1; j < all.size(); ++j) {
      const QRectF shared = all[i].box.intersected(all[j].box);
      if (shared.width() > 1 && shared.height() > 1)
        out.push_back(QString("'%1' over '%2'")
                          .arg(all[i].words.left(40), all[j].words.left(40))
                          .toStdString());
    }
  return out;
}

TEST(SceneText, RankViewNeverDrawsTextOverText) {
  for (const Variant& variant : standard_variants()) {
    const auto planned = plan_settings(testing::variant_settings(variant));
    const auto ops = std::int64_t(planned->plan.schedule.ops.size());
    for (const ShowMemory show :
         {ShowMemory::All, ShowMemory::StatesAndCopies, ShowMemory::ModelStates})
      for (std::int64_t step = -1; step < ops; ++step) {
        QGraphicsScene scene;
        RankViewOptions options;
        options.show = show;
        build_rank_scene(scene, *planned, step, 0, options);
        const auto found = overlaps(scene);
        ASSERT_TRUE(found.empty())
            << variant.label << " show " << int(show) << " step " << step << ": " << found.front();
      }
  }
}

// Zoomed to the step's peak, the note saying the capacity is above the bar stays off the blocks
// and off what the op freed (it lay on the walkthrough's red-hatched gradients at the peak), and no
// text lies over text in that scale either.
TEST(SceneText, CapacityNoteStaysOffTheBlocks) {
  std::vector<Settings> runs;
  for (const Variant& variant : standard_variants())
    runs.push_back(testing::variant_settings(variant));
  runs.push_back(testing::llama_on_64(OffloadDevice::Nvme, OffloadDevice::Nvme));
  for (const Settings& settings : runs) {
    const auto planned = plan_settings(settings);
    const auto ops = std::int64_t(planned->plan.schedule.ops.size());
    const std::int64_t stride = ops > 100 ? 13 : 1;  // every op of the walkthrough's variants
    for (const ShowMemory show :
         {ShowMemory::All, ShowMemory::StatesAndCopies, ShowMemory::ModelStates})
      for (std::int64_t step = -1; step < ops; step += stride) {
        QGraphicsScene scene;
        RankViewOptions options;
        options.show = show;
        options.scale = ScaleMode::Peak;
        build_rank_scene(scene, *planned, step, 0, options);
        const auto found = overlaps(scene);
        ASSERT_TRUE(found.empty())
            << "show " << int(show) << " step " << step << ": " << found.front();
        int notes = 0;
        for (QGraphicsItem* note : testing::items_with_role(scene, ItemRole::Capacity)) {
          if (!dynamic_cast<QGraphicsSimpleTextItem*>(note)) continue;  // a line on the bar
          ++notes;
          const QRectF box = note->sceneBoundingRect();
          for (const ItemRole role : {ItemRole::Block, ItemRole::Freed})
            for (QGraphicsItem* block : testing::items_with_role(scene, role)) {
              const QRectF shared = box.intersected(block->sceneBoundingRect());
              ASSERT_FALSE(shared.width() > 0.5 && shared.height() > 0.5)
                  << planned->plan.request.model.name << " stage "
                  << planned->plan.schedule.context.stage << " show " << int(show) << " step "
                  << step << ": the note on a block of "
                  << to_string(Component(testing::data_int(block, item_key::Component)));
            }
        }
        ASSERT_GT(notes, 0) << "every run has a device whose capacity is above its peak";
      }
  }
}

TEST(SceneText, LargerJobsAndTheTimelineNeither) {
  Settings settings = testing::llama_on_64(OffloadDevice::Nvme, OffloadDevice::Nvme);
  set_precision(settings, Precision::Bf16);
  const auto planned = plan_settings(settings);
  const auto ops = std::int64_t(planned->plan.schedule.ops.size());
  for (std::int64_t step = -1; step < ops; step += 7) {
    QGraphicsScene scene;
    build_rank_scene(scene, *planned, step, 0, RankViewOptions{});
    const auto found = overlaps(scene);
    ASSERT_TRUE(found.empty()) << "step " << step << ": " << found.front();
  }
  const auto walkthrough = plan_settings(walkthrough_settings());
  for (const auto* trace : {&planned->predicted, &walkthrough->predicted}) {
    QGraphicsScene scene;
    TimelineGeometry geometry;
    geometry.pixels_per_second = 1200 / trace_end_time(*trace);
    build_timeline_scene(scene, *trace, geometry);
    const auto found = overlaps(scene);
    EXPECT_TRUE(found.empty()) << found.front();
  }
}

}  // namespace
}  // namespace zerolens::gui
