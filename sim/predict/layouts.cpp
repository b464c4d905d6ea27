#include "sim/predict/layouts.hpp"

#include <algorithm>

#include "sim/core/error.hpp"

namespace zerolens {
namespace {

ParallelLayout layout_of(const PlanRequest& base) {
  const TrainingConfig& c = base.config;
  return {.tensor = c.tensor_parallel.size,
          .pipeline = c.pipeline.size,
          .virtual_stages = c.pipeline.virtual_stages,
          .sequence_parallel = c.tensor_parallel.sequence_parallel,
          .data = base.dp_size,
          .expert = c.expert_parallel.size};
}

// The layouts compared, the job's own among them, TP then PP ascending.
std::vector<ParallelLayout> layouts_to_compare(const PlanRequest& base) {
  const ParallelLayout own = layout_of(base);
  const int world = own.data * own.tensor * own.pipeline;
  const auto& shape = base.model.shape;
  // (Tensor parallelism of MoE and latent-attention layers is not modelled.)
  const bool splits = shape && !shape->moe && !shape->mla;
  const int tp_limit = splits ? std::min(base.cluster.node.gpus_per_node, world) : 1;
  const int blocks = shape ? shape->layers : 1;
  std::vector<ParallelLayout> layouts{own};
  for (int tp = 1; tp <= tp_limit; tp *= 2)
    for (int pp = 1; pp <= std::min(8, blocks); pp *= 2) {
      if (world % (tp * pp) != 0 || blocks % pp != 0) continue;
      const bool keeps_chunks = pp == own.pipeline;
      ParallelLayout layout{.tensor = tp,
                            .pipeline = pp,
                            .virtual_stages = keeps_chunks ? own.virtual_stages : 1,
                            .sequence_parallel = tp > 1 && own.sequence_parallel,
                            .data = world / (tp * pp),
                            .expert = own.expert};
      if (std::find(layouts.begin(), layouts.end(), layout) == layouts.end())
        layouts.push_back(layout);
    }
  std::sort(layouts.begin(), layouts.end(), [](const ParallelLayout& a, const ParallelLayout& b) {
    return std::pair(a.tensor, a.pipeline) < std::pair(b.tensor, b.pipeline);
  });
  return layouts;
}

// The job's stage and offload, or under a pipeline the highest DeepSpeed's pipeline engine runs:
// ZeRO-1, the optimizer offloaded to the CPU when the job offloads it (NVMe swapping of optimizer
// states is stage 3's), the parameters on the GPU (their offload is stage 3's too).
SweepPoint point_of(const PlanRequest& base, const ParallelLayout& layout, std::int64_t micro,
                    std::int64_t accumulation, bool& stage_lowered) {
  const ZeroConfig& zero = base.config.zero;
  SweepPoint point{.layout = layout,
                   .stage = zero.stage,
                   .optimizer = zero.offload_optimizer.device,
                   .param = zero.offload_param.device,
                   .micro_batch = micro,
                   .grad_accumulation = accumulation,
                   .checkpointing = base.config.activation_checkpointing.enabled};
  stage_lowered = layout.pipeline > 1 && zero.stage > 1 && !base.config.is_fsdp() &&
                  !base.config.is_colossalai();
  if (stage_lowered) {
    point.stage = 1;
    if (point.optimizer == OffloadDevice::Nvme) point.optimizer = OffloadDevice::Cpu;
    point.param = OffloadDevice::None;
  }
  return point;
}

}  // namespace

std::string LayoutPlan::label() const {
  return result.point.layout.label() + (stage_lowered ? " (ZeRO-1)" : "");
}

LayoutComparison compare_layouts(const PlanRequest& base, const TimelineOptions& options) {
  LayoutComparison comparison;
  const std::int64_t train_batch = sweep_train_batch(base);
  const std::int64_t micro = base.config.batch.micro_batch_per_gpu.value_or(1);
  const ParallelLayout own = layout_of(base);
  for (const ParallelLayout& layout : layouts_to_compare(base)) {
    const std::int64_t per_rank = train_batch / layout.data;
    if (train_batch % layout.data != 0 || per_rank % micro != 0) {
      comparison.left_out.push_back(
          {layout, "the global batch " + std::to_string(train_batch) + " does not split over " +
                       std::to_string(layout.data) + " data-parallel ranks in micro-batches of " +
                       std::to_string(micro)});
      continue;
    }
    LayoutPlan plan{.current = layout == own};
    const SweepPoint point = point_of(base, layout, micro, per_rank / micro, plan.stage_lowered);
    try {
      plan.result = evaluate_sweep_point(base, point, options);
    } catch (const InputError& refused) {
      comparison.left_out.push_back({layout, refused.what()});
      continue;
    }
    comparison.layouts.push_back(std::move(plan));
  }
  return comparison;
}

}  // namespace zerolens
