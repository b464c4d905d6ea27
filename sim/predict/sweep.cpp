#include "sim/predict/sweep.hpp"

#include <algorithm>
#include <set>
#include <sstream>

#include "sim/core/error.hpp"
#include "sim/plan/variants.hpp"
#include "sim/predict/prediction.hpp"

namespace zerolens {
namespace {

bool has_nvme(const Cluster& cluster) {
  return cluster.node.nvme_capacity_bytes > 0 && cluster.node.nvme_read_bandwidth > 0 &&
         cluster.node.nvme_write_bandwidth > 0;
}

bool contains(const std::vector<OffloadDevice>& devices, OffloadDevice device) {
  return std::find(devices.begin(), devices.end(), device) != devices.end();
}

// Powers of two up to the batch per rank that divide it.
std::vector<std::int64_t> default_micro_batches(std::int64_t batch_per_rank) {
  std::vector<std::int64_t> sizes;
  for (std::int64_t size = 1; size <= batch_per_rank; size *= 2) {
    if (batch_per_rank % size == 0) sizes.push_back(size);
  }
  return sizes;
}

std::vector<std::int64_t> micro_batches_of(const SweepSpace& space, std::int64_t batch_per_rank,
                                           std::vector<std::string>& notes) {
  if (space.micro_batches.empty()) return default_micro_batches(batch_per_rank);
  std::vector<std::int64_t> kept;
  for (const auto size : std::set<std::int64_t>(space.micro_batches.begin(), space.micro_batches.end())) {
    if (size >= 1 && batch_per_rank % size == 0) {
      kept.push_back(size);
    } else {
      notes.push_back("micro-batch " + std::to_string(size) + " skipped: it does not divide the batch per rank (" +
                      std::to_string(batch_per_rank) + ")");
    }
  }
  return kept;
}

// Why DeepSpeed (or this cluster) refuses a stage/offload combination; empty when accepted.
std::string refusal(int stage, OffloadDevice optimizer, OffloadDevice param, bool nvme_available,
                    bool fsdp, bool pipeline) {
  const ZeroStage zero{stage};
  if (pipeline && stage > 1) return "DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only";
  if (fsdp && stage != 3) return "FSDP shards parameters (stage 3)";
  if (fsdp && optimizer != param)
    return "FSDP's CPUOffloadPolicy offloads parameters and optimizer together";
  if (fsdp && optimizer == OffloadDevice::Nvme) return "FSDP offloads to the CPU only";
  if (param != OffloadDevice::None && !zero.offload_allowed(OffloadKind::Param)) {
    return "parameter offload needs stage 3";
  }
  if (optimizer != OffloadDevice::None && !zero.offload_allowed(OffloadKind::Optimizer)) {
    return "optimizer offload needs stage 1, 2 or 3";
  }
  if (optimizer == OffloadDevice::Nvme && !zero.swaps_optimizer_to_nvme()) {
    return "NVMe optimizer offload is a stage-3 feature";
  }
  if ((optimizer == OffloadDevice::Nvme || param == OffloadDevice::Nvme) && !nvme_available) {
    return "the cluster has no NVMe";
  }
  return {};
}

TrainingConfig config_of(const TrainingConfig& base, const SweepPoint& point, std::int64_t train_batch,
                         std::int64_t grad_accumulation) {
  TrainingConfig config =
      apply_variant(base, {"", point.stage, point.optimizer, point.param, std::nullopt});
  config.batch.micro_batch_per_gpu = point.micro_batch;
  config.batch.gradient_accumulation_steps = grad_accumulation;
  config.batch.train_batch_size = train_batch;
  config.activation_checkpointing.enabled = point.checkpointing;
  return config;
}

// The point with `grad_accumulation` micro-steps, simulated as `simulate` says.
Prediction predict_with_accumulation(const PlanRequest& base, const SweepPoint& point,
                                     std::int64_t grad_accumulation, const TimelineOptions& options,
                                     Simulate simulate) {
  PlanRequest request;
  request.model = base.model;
  request.cluster = base.cluster;
  request.dp_size = base.dp_size;
  request.options = base.options;
  request.config = config_of(base.config, point, point.micro_batch * grad_accumulation * base.dp_size,
                             grad_accumulation);
  return predict(std::move(request), {.timeline = options, .simulate = simulate});
}

struct StepFigures {
  double step_time = 0, exposed = 0, model_flops = 0;  // model_flops: per GPU, whole step
};

StepFigures step_figures(const Timeline& timeline) {
  return {timeline.step_time, timeline.exposed_communication, timeline.model_flops_per_gpu * timeline.step_time};
}

// Figures of `steps` micro-steps from simulations of `capped` and `capped - 1`: the first and last
// micro-steps differ from the rest, the ones between repeat the same ops.
StepFigures extrapolate(const StepFigures& shorter, const StepFigures& capped, std::int64_t extra_steps) {
  const double extra = double(extra_steps);
  return {capped.step_time + extra * (capped.step_time - shorter.step_time),
          capped.exposed + extra * (capped.exposed - shorter.exposed),
          capped.model_flops + extra * (capped.model_flops - shorter.model_flops)};
}

void fill_memory(SweepResult& result, const Plan& plan) {
  for (int d = 0; d < kDeviceCount; ++d) {
    result.peak[std::size_t(d)] = plan.devices[std::size_t(d)].peak;
    result.capacity[std::size_t(d)] = plan.devices[std::size_t(d)].capacity;
  }
  result.fits = plan.fits();
}

bool faster(const SweepResult& a, const SweepResult& b) {
  if (a.fits != b.fits) return a.fits;
  if (a.fits && a.tokens_per_second != b.tokens_per_second) return a.tokens_per_second > b.tokens_per_second;
  return a.peak[0] < b.peak[0];
}

}  // namespace

std::string SweepPoint::label() const {
  std::ostringstream text;
  text << ZeroStage{stage}.name() << " opt:" << to_string(optimizer)
       << " param:" << to_string(param) << " mb " << micro_batch << " x ga " << grad_accumulation
       << (checkpointing ? " ckpt" : "");
  return text.str();
}

std::vector<SweepPoint> enumerate_sweep(const PlanRequest& base, const SweepSpace& space,
                                        std::vector<std::string>& notes) {
  const ResolvedBatch batch = resolve_batch(base.config.batch, base.dp_size);
  const std::int64_t batch_per_rank = batch.micro_batch_per_gpu * batch.gradient_accumulation_steps;
  const bool nvme_available = has_nvme(base.cluster);
  if (!nvme_available && (contains(space.optimizer_devices, OffloadDevice::Nvme) ||
                          contains(space.param_devices, OffloadDevice::Nvme))) {
    notes.push_back("NVMe offload skipped: cluster '" + base.cluster.name + "' has no NVMe (capacity and bandwidth)");
  }
  std::vector<SweepPoint> points;
  for (const auto micro : micro_batches_of(space, batch_per_rank, notes)) {
    for (const int stage : std::set<int>(space.stages.begin(), space.stages.end())) {
      for (const auto optimizer : space.optimizer_devices) {
        for (const auto param : space.param_devices) {
          if (!refusal(stage, optimizer, param, nvme_available, base.config.is_fsdp(),
                       base.config.pipeline.active())
                   .empty())
            continue;
          for (const bool checkpointing : space.checkpointing) {
            points.push_back({stage, optimizer, param, micro, batch_per_rank / micro, checkpointing});
          }
        }
      }
    }
  }
  if (points.empty()) throw InputError("sweep", "no configuration left to evaluate (see the notes)");
  return points;
}

SweepResult evaluate_sweep_point(const PlanRequest& base, const SweepPoint& point, const TimelineOptions& options) {
  SweepResult result{.point = point};
  const std::int64_t capped = std::min(point.grad_accumulation, kSweepSimulatedMicroSteps);
  // Only what fits is simulated (and ranked).
  const Prediction prediction =
      predict_with_accumulation(base, point, capped, options, Simulate::IfFits);
  const Plan& plan = prediction.plan;
  fill_memory(result, plan);
  if (!result.fits) return result;
  StepFigures figures = step_figures(prediction.timeline);
  if (point.grad_accumulation > capped) {
    const StepFigures shorter = step_figures(
        predict_with_accumulation(base, point, capped - 1, options, Simulate::Always).timeline);
    figures = extrapolate(shorter, figures, point.grad_accumulation - capped);
  }
  const double tokens = double(point.micro_batch * point.grad_accumulation * base.dp_size) * double(plan.seq_len);
  const double peak = base.cluster.gpu.peak_flops(base.config.precision.precision);
  result.step_time = figures.step_time;
  result.exposed_communication = figures.exposed;
  result.tokens_per_second = tokens / figures.step_time;
  result.model_flops_per_gpu = figures.model_flops / figures.step_time;
  result.mfu = peak > 0 ? result.model_flops_per_gpu / peak : 0;
  return result;
}

SweepReport run_sweep(const PlanRequest& base, const SweepSpace& space, const TimelineOptions& options,
                      const SweepProgress& progress) {
  SweepReport report;
  const ResolvedBatch batch = resolve_batch(base.config.batch, base.dp_size);
  report.train_batch_size = batch.train_batch_size;
  report.batch_per_rank = batch.micro_batch_per_gpu * batch.gradient_accumulation_steps;
  const std::vector<SweepPoint> points = enumerate_sweep(base, space, report.notes);
  const auto total = std::int64_t(points.size());
  report.results.reserve(points.size());
  for (const auto& point : points) {
    report.results.push_back(evaluate_sweep_point(base, point, options));
    report.fitting += report.results.back().fits ? 1 : 0;
    if (progress) progress(std::int64_t(report.results.size()), total);
  }
  report.evaluated = total;
  std::stable_sort(report.results.begin(), report.results.end(), faster);
  return report;
}

}  // namespace zerolens
