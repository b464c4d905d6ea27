#pragma once
// The job's GPUs split other ways (tensor x pipeline x data parallel) at the job's global batch,
// micro-batch, stage and offload: each layout's GPU peak and step time side by side (the GUI's
// Compare tab). A pipeline layout of a stage-2/3 job is planned at ZeRO-1, the highest stage
// DeepSpeed's pipeline engine runs; layouts the planner refuses are left out with its reason.
#include <string>
#include <vector>

#include "sim/predict/sweep.hpp"

namespace zerolens {

struct LayoutPlan {
  SweepResult result;          // the layout, the stage and offload planned, peak, step time
  bool stage_lowered = false;  // planned at ZeRO-1 because the pipeline refuses the job's stage
  bool current = false;        // the job's own layout
  std::string label() const;   // "tp 2 x pp 2 x dp 2 (ZeRO-1)"
};

struct LeftOutLayout {
  ParallelLayout layout;
  std::string reason;
};

struct LayoutComparison {
  std::vector<LayoutPlan> layouts;  // tensor-parallel size, then pipeline stages, ascending
  std::vector<LeftOutLayout> left_out;
};

// TP in powers of two up to a node's GPUs, PP in powers of two up to 8 that divide the model's
// blocks, each with tp x pp dividing the GPUs, and the job's own layout. Sequence parallelism is
// kept where TP is, the pipeline's schedule as the job's (1F1B for a layout without the job's
// virtual stages).
LayoutComparison compare_layouts(const PlanRequest& base, const TimelineOptions& options);

}  // namespace zerolens
