#pragma once
// The timeline's scene: a Gantt chart of a trace's ops, one row per rank and stream, with a time
// axis. Each op's rectangle carries its rank and schedule index (item data) for clicks and tests.
#include <QGraphicsLineItem>
#include <QGraphicsRectItem>
#include <QGraphicsScene>
#include <QPen>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "gui/scene_items.hpp"
#include "sim/trace/trace.hpp"

namespace zerolens::gui {

struct TimelineGeometry {
  double pixels_per_second = 1;
  double label_width = 150;
  double row_height = 22;
  int max_ranks = 16;  // rows for more ranks would only repeat the same ops
  // With tensor parallelism a trace's ranks are data-parallel indices (its ranks are one
  // data-parallel group); the rows name the global rank of TP index `tp_index` in each, Megatron's
  // placement (global = dp x tp_size + tp), and its coordinate: "rank 5 (tp 1, dp 2) compute".
  int tp_size = 1;
  int tp_index = 0;
};

// "rank 0", or with TP "rank 5 (tp 1, dp 2)" for a trace's rank (a data-parallel index) 2.
QString timeline_rank_name(int trace_rank, const TimelineGeometry& geometry);

struct TimelineItems {
  std::unordered_map<std::int64_t, std::vector<QGraphicsRectItem*>>
      by_index;               // schedule index -> one per rank
  std::vector<QString> rows;  // "rank 0 compute", top to bottom
  double end_time = 0;        // seconds, the last op's end
  double label_width = 0;     // pixels left of the step's start (TimelineGeometry's)
  double pixels_per_second = 0;
  double rows_height = 0;            // pixels, all rows
  std::vector<QGraphicsItem*> axis;  // the time axis's ticks and labels drawn now
  QGraphicsLineItem* cursor = nullptr;
  // The row names on an opaque column at the left, above the ops: the view keeps it at the left
  // edge of what it shows (pin_row_labels), as Perfetto keeps its track names.
  QGraphicsItem* row_labels = nullptr;
};

// The time axis's ticks and their labels between the scene's x `left` and `right` (what a view
// shows), replacing those drawn before; a tick about every 100 pixels at any zoom, labelled with
// the decimals it needs.
void draw_time_axis(QGraphicsScene& scene, TimelineItems& items, double left, double right);
// Moves the row labels' column to the scene's x `left` (the view's left edge).
void pin_row_labels(const TimelineItems& items, double left);

// The outline of an op's rectangle when the cursor is not on it.
QPen op_pen(const QRectF& rect);
// Seconds from the start of the step to the last op's end.
double trace_end_time(const Trace& trace);
// One row per shown rank and stream, then the rank's exposed lane (trace_exposed_intervals:
// collectives, and apart the offload streams, busy while compute idles). Ops narrower than two
// pixels are drawn two pixels wide, and runs of them merged into one dotted item (ItemRole::Op
// with item_key::Ops > 1) whose tooltip lists them.
TimelineItems build_timeline_scene(QGraphicsScene& scene, const Trace& trace,
                                   const TimelineGeometry& geometry);
// The colour legend of a trace's op kinds and the exposed lane (rich text).
QString timeline_legend(const Trace& trace);
// Time unit for axes: seconds, milliseconds or microseconds by the span shown.
struct TimeUnit {
  double per_second;
  const char* name;
};
TimeUnit time_unit_for(double seconds);

}  // namespace zerolens::gui
