// The seed systems in the GUI: the placement-policy control plans ColossalAI's ShardedModelV2, the
// shard strategy control its gathers, Gemini's moves are drawn as host-device copies, and the
// delayed parameter update's CPU step is drawn beside the forward and backward it overlaps.
#include <gtest/gtest.h>

#include <QGraphicsRectItem>
#include <QGraphicsScene>
#include <QGraphicsSimpleTextItem>

#include "gui/config_panel.hpp"
#include "gui/main_window.hpp"
#include "gui/session.hpp"
#include "gui/settings.hpp"
#include "gui/timeline_scene.hpp"
#include "gui_test_helpers.hpp"

namespace zerolens::gui {
namespace {

using testing::items_with_role;

TEST(SeedSystems, ThePlacementControlPlansColossalAi) {
  MainWindow window(walkthrough_settings(), false);
  ConfigPanel& panel = window.config_panel();
  EXPECT_FALSE(panel.shard_strategy().isEnabled());
  panel.placement().setCurrentIndex(3);  // ColossalAI: auto (Gemini)
  const TrainingConfig& config = window.session().settings().config;
  EXPECT_EQ(config.framework, Framework::ColossalAi);
  EXPECT_EQ(config.colossalai.placement, PlacementPolicy::Auto);
  EXPECT_EQ(config.zero.stage, 3);
  EXPECT_TRUE(window.session().error().isEmpty()) << window.session().error().toStdString();
  EXPECT_TRUE(panel.shard_strategy().isEnabled());
  EXPECT_FALSE(panel.offload_optimizer().isEnabled());  // the placement decides the offload
  panel.shard_strategy().setCurrentIndex(1);
  EXPECT_EQ(window.session().settings().config.colossalai.shard_strategy,
            ShardStrategy::BucketTensor);
  // The bucket strategy gathers a module's weight and bias at once: fewer gathers in the plan.
  const auto gathers = [&] {
    return window.session().planned()->plan.comm.of(OpKind::AllGather).calls;
  };
  const std::int64_t bucket = gathers();
  panel.shard_strategy().setCurrentIndex(0);
  EXPECT_LT(bucket, gathers());
  panel.placement().setCurrentIndex(0);  // back to DeepSpeed
  EXPECT_EQ(window.session().settings().config.framework, Framework::DeepSpeed);
}

// LLaMA-2 13B on one A100-80GB, micro-batch 27 x 2048 tokens, checkpointed: with "auto" Gemini
// keeps moving shards (the fp32 gradients, master and moments are on the host) and the job fits.
Settings gemini_settings() {
  Settings settings = cli_default_settings();
  Diagnostics diagnostics;
  load_model_spec(settings, "llama2-13b", diagnostics);
  settings.gpus = 1;
  apply_edits(settings, {.framework = Framework::ColossalAi,
                         .placement = PlacementPolicy::Auto,
                         .micro_batch = 27,
                         .seq_len = 2048,
                         .activation_checkpointing = true});
  return settings;
}

TEST(SeedSystems, GeminisMovesAreDrawnAsHostDeviceCopies) {
  const auto planned = plan_settings(gemini_settings());
  ASSERT_GT(planned->plan.schedule.gemini.steady_evicted, 0);
  EXPECT_TRUE(planned->plan.fits());
  QGraphicsScene scene;
  TimelineGeometry geometry;
  geometry.pixels_per_second = 1e4;
  const TimelineItems items = build_timeline_scene(scene, planned->predicted, geometry);
  // Every eviction (a backward copy of shards to the host) is an op of the d2h lane.
  int evictions = 0;
  for (const TraceOp& op : planned->predicted.ops) {
    if (op.kind != "copy_d2h" || op.phase != "backward" || op.bucket >= 0) continue;
    ++evictions;
    ASSERT_TRUE(items.by_index.count(op.index));
    EXPECT_EQ(op.stream, "d2h");
  }
  EXPECT_GT(evictions, 0);
  EXPECT_NE(std::find(items.rows.begin(), items.rows.end(), "rank 0 d2h"), items.rows.end());
}

// GPT-2 1.5B on 8 x A100-40GB, ZeRO-2 with the optimizer on the CPU and the delayed update.
Settings delayed_settings(bool delayed) {
  Settings settings = default_settings();
  set_stage(settings, 2);
  set_offload(settings, OffloadDevice::Cpu, OffloadDevice::None);
  set_delayed_update(settings, delayed);
  return settings;
}

TEST(SeedSystems, TheDelayedUpdateIsDrawnBesideTheForwardAndBackward) {
  const auto delayed = plan_settings(delayed_settings(true));
  const auto serial = plan_settings(delayed_settings(false));
  EXPECT_LT(delayed->timeline.step_time, serial->timeline.step_time);
  const Trace& trace = delayed->predicted;
  QGraphicsScene scene;
  TimelineGeometry geometry;
  geometry.pixels_per_second = 1000 / trace_end_time(trace);
  const TimelineItems items = build_timeline_scene(scene, trace, geometry);
  const TraceOp* step = nullptr;
  double compute_start = 1e300, compute_end = 0;
  for (const TraceOp& op : trace.ops) {
    if (op.rank != 0) continue;
    if (op.kind == "optimizer_step") step = &op;
    if (op.stream == "compute" && (op.kind == "forward" || op.kind == "backward")) {
      compute_start = std::min(compute_start, op.start);
      compute_end = std::max(compute_end, op.start + op.duration);
    }
  }
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->stream, "cpu");
  // Drawn in the CPU lane over the forward and backward's span.
  EXPECT_LT(step->start, compute_end);
  EXPECT_GT(step->start + step->duration, compute_start);
  const auto drawn = items.by_index.find(step->index);
  ASSERT_NE(drawn, items.by_index.end());
  const QGraphicsRectItem* item = drawn->second.front();
  EXPECT_TRUE(item->toolTip().contains("delayed parameter update"))
      << item->toolTip().toStdString();
  bool labelled = false;
  for (const QGraphicsItem* child : item->childItems()) {
    if (const auto* text = dynamic_cast<const QGraphicsSimpleTextItem*>(child))
      labelled = labelled || text->text().startsWith("delayed update");
  }
  EXPECT_TRUE(labelled);
}

}  // namespace
}  // namespace zerolens::gui
