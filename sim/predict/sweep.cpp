#include "sim/predict/sweep.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

#include "sim/core/error.hpp"
#include "sim/plan/variants.hpp"
#include "sim/predict/prediction.hpp"

namespace zerolens {
namespace {

void apply_zeropp(ZeroConfig& zero, ZeroPlusPlus variant, int hpz_group) {
  const bool all = variant == ZeroPlusPlus::All;
  zero.hpz_partition_size = all || variant == ZeroPlusPlus::Hpz ? hpz_group : 1;
  zero.quantized_weights = all || variant == ZeroPlusPlus::Qwz;
  zero.quantized_gradients = all || variant == ZeroPlusPlus::Qgz;
}

void apply_layout(TrainingConfig& config, const ParallelLayout& layout) {
  config.tensor_parallel.size = layout.tensor;
  config.tensor_parallel.sequence_parallel = layout.sequence_parallel;
  config.pipeline.size = layout.pipeline;
  config.pipeline.virtual_stages = layout.virtual_stages;
  config.expert_parallel.size = layout.expert;
  if (layout.virtual_stages > 1) {
    config.pipeline.schedule = PipelineSchedule::Interleaved;
  } else if (config.pipeline.schedule == PipelineSchedule::Interleaved) {
    config.pipeline.schedule = PipelineSchedule::OneFOneB;
  }
}

// The point's request with `grad_accumulation` micro-steps.
PlanRequest request_of(const PlanRequest& base, const SweepPoint& point,
                       std::int64_t grad_accumulation) {
  PlanRequest request;
  request.model = base.model;
  request.cluster = base.cluster;
  request.dp_size = point.layout.data;
  request.options = base.options;
  TrainingConfig config = apply_variant(base.config, {"", point.stage, point.optimizer, point.param,
                                                      std::nullopt, std::nullopt, std::nullopt});
  apply_layout(config, point.layout);
  // hpZ's secondary partition spans a node's GPUs (the ZeRO++ paper's setting), or all of DP within
  // one.
  if (point.zeropp)
    apply_zeropp(config.zero, *point.zeropp,
                 std::min(base.cluster.node.gpus_per_node, point.layout.data));
  config.batch.micro_batch_per_gpu = point.micro_batch;
  config.batch.gradient_accumulation_steps = grad_accumulation;
  config.batch.train_batch_size = point.micro_batch * grad_accumulation * point.layout.data;
  config.activation_checkpointing.enabled = point.checkpointing;
  request.config = std::move(config);
  return request;
}

struct StepFigures {
  double step_time = 0, exposed = 0, model_flops = 0;  // model_flops: per GPU, whole step
};

StepFigures step_figures(const Timeline& timeline) {
  return {timeline.step_time, timeline.exposed_communication,
          timeline.model_flops_per_gpu * timeline.step_time};
}

// Figures of the step from simulations of `capped` micro-steps and one period fewer: the first and
// last periods differ from the rest, the ones between repeat the same ops.
StepFigures extrapolate(const StepFigures& shorter, const StepFigures& capped,
                        std::int64_t extra_periods) {
  const double extra = double(extra_periods);
  return {capped.step_time + extra * (capped.step_time - shorter.step_time),
          capped.exposed + extra * (capped.exposed - shorter.exposed),
          capped.model_flops + extra * (capped.model_flops - shorter.model_flops)};
}

double headroom_of(const SweepResult& result) {
  double smallest = 1;
  for (int d = 0; d < kDeviceCount; ++d) {
    const auto capacity = result.capacity[std::size_t(d)], peak = result.peak[std::size_t(d)];
    if (capacity > 0 && (peak > 0 || Device(d) == Device::Gpu))
      smallest = std::min(smallest, 1.0 - double(peak) / double(capacity));
  }
  return smallest;
}

void fill_memory(SweepResult& result, const Plan& plan) {
  for (int d = 0; d < kDeviceCount; ++d) {
    result.peak[std::size_t(d)] = plan.devices[std::size_t(d)].peak;
    result.capacity[std::size_t(d)] = plan.devices[std::size_t(d)].capacity;
  }
  result.fits = plan.fits();
  result.headroom = headroom_of(result);
  const auto gpu = std::size_t(Device::Gpu), cpu = std::size_t(Device::Cpu),
             nvme = std::size_t(Device::Nvme);
  result.overflows_larger_micro_batches =
      plan.gpu.allocated + plan.gpu.outside_allocator > result.capacity[gpu] ||
      result.peak[cpu] > result.capacity[cpu] || result.peak[nvme] > result.capacity[nvme];
}

bool faster(const SweepResult& a, const SweepResult& b) {
  if (a.fits != b.fits) return a.fits;
  if (a.fits && a.tokens_per_second != b.tokens_per_second)
    return a.tokens_per_second > b.tokens_per_second;
  return a.peak[0] < b.peak[0];
}

// Consecutive points that differ only in the micro-batch: the pruning walks them upwards.
struct Chain {
  std::size_t begin = 0, end = 0;
};

bool same_chain(const SweepPoint& a, const SweepPoint& b) {
  return a.layout == b.layout && a.zeropp == b.zeropp && a.stage == b.stage &&
         a.optimizer == b.optimizer && a.param == b.param && a.checkpointing == b.checkpointing;
}

std::vector<Chain> chains_of(const std::vector<SweepPoint>& points) {
  std::vector<Chain> chains;
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (chains.empty() || !same_chain(points[chains.back().begin], points[i]))
      chains.push_back({i, i});
    chains.back().end = i + 1;
  }
  return chains;
}

// What became of every point, written by the workers (each point by one).
struct Outcomes {
  std::vector<std::optional<SweepResult>> results;
  std::vector<std::string> refusals;
  std::vector<char> pruned;
  std::exception_ptr first_refusal;
  std::mutex mutex;  // guards first_refusal and the progress
  std::int64_t done = 0, total = 0;
  const SweepProgress* progress = nullptr;

  explicit Outcomes(std::size_t count)
      : results(count), refusals(count), pruned(count, 0), total(std::int64_t(count)) {}
  void advance(std::int64_t points) {
    const std::lock_guard lock(mutex);
    done += points;
    if (*progress) (*progress)(done, total);
  }
};

void evaluate_chain(const PlanRequest& base, const std::vector<SweepPoint>& points,
                    const Chain& chain, const SweepSpace& space, const TimelineOptions& options,
                    Outcomes& outcomes) {
  for (std::size_t i = chain.begin; i < chain.end; ++i) {
    try {
      outcomes.results[i] = evaluate_sweep_point(base, points[i], options);
    } catch (const InputError& error) {
      outcomes.refusals[i] = error.what();
      const std::lock_guard lock(outcomes.mutex);
      if (!outcomes.first_refusal) outcomes.first_refusal = std::current_exception();
    }
    if (space.prune && outcomes.results[i] && outcomes.results[i]->overflows_larger_micro_batches) {
      std::fill(outcomes.pruned.begin() + std::ptrdiff_t(i + 1),
                outcomes.pruned.begin() + std::ptrdiff_t(chain.end), 1);
      outcomes.advance(std::int64_t(chain.end - i));
      return;
    }
    outcomes.advance(1);
  }
}

// Runs `work` on every chain with `threads` workers; the first exception other than a refusal
// stops the rest and is rethrown.
template <typename Work>
void for_each_chain(const std::vector<Chain>& chains, int threads, const Work& work) {
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  const auto worker = [&] {
    for (std::size_t index = next++; index < chains.size(); index = next++) {
      try {
        work(chains[index]);
      } catch (...) {
        const std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        next = chains.size();
      }
    }
  };
  const auto count = std::size_t(std::clamp<std::int64_t>(threads, 1, std::int64_t(chains.size())));
  std::vector<std::thread> workers;
  for (std::size_t t = 1; t < count; ++t) workers.emplace_back(worker);
  worker();
  for (auto& thread : workers) thread.join();
  if (failure) std::rethrow_exception(failure);
}

SweepFamily* family_of(std::vector<SweepFamily>& families, const ParallelLayout& layout) {
  for (auto& family : families)
    if (family.layout == layout) return &family;
  return nullptr;
}

// Gathers the outcomes into the report, counting them per family.
void collect(SweepReport& report, const std::vector<SweepPoint>& points, Outcomes& outcomes) {
  for (std::size_t i = 0; i < points.size(); ++i) {
    SweepFamily* family = family_of(report.families, points[i].layout);
    if (outcomes.results[i]) {
      const bool fits = outcomes.results[i]->fits;
      report.fitting += fits ? 1 : 0;
      family->evaluated += 1;
      family->fitting += fits ? 1 : 0;
      report.results.push_back(std::move(*outcomes.results[i]));
    } else if (outcomes.pruned[i]) {
      ++report.pruned;
      ++family->pruned;
    } else {
      ++report.refused;
      if (family->refused++ == 0) family->refusal = outcomes.refusals[i];
    }
  }
  report.evaluated = std::int64_t(report.results.size());
}

}  // namespace

MicroStepSampling sweep_sampling(const PipelineParallelism& pipeline,
                                 std::int64_t grad_accumulation) {
  if (!pipeline.active()) return {std::min(grad_accumulation, kSweepSimulatedMicroSteps), 1};
  switch (pipeline.schedule) {
    case PipelineSchedule::GPipe:
      return {grad_accumulation, 1};
    case PipelineSchedule::OneFOneB:
      return {std::min<std::int64_t>(grad_accumulation, pipeline.size + 2), 1};
    case PipelineSchedule::Interleaved:
      // Accumulation that rounds of pp do not divide is planned as it is, for the planner to
      // refuse.
      if (grad_accumulation % pipeline.size != 0) return {grad_accumulation, 1};
      return {std::min<std::int64_t>(grad_accumulation, 3 * pipeline.size), pipeline.size};
  }
  return {grad_accumulation, 1};
}

SweepResult evaluate_sweep_point(const PlanRequest& base, const SweepPoint& point,
                                 const TimelineOptions& options) {
  SweepResult result{.point = point};
  TrainingConfig layout_config = base.config;
  apply_layout(layout_config, point.layout);
  const MicroStepSampling sampling =
      sweep_sampling(layout_config.pipeline, point.grad_accumulation);
  // Only what fits is simulated (and ranked).
  const Prediction prediction = predict(request_of(base, point, sampling.simulated),
                                        {.timeline = options, .simulate = Simulate::IfFits});
  const Plan& plan = prediction.plan;
  fill_memory(result, plan);
  if (!result.fits) return result;
  StepFigures figures = step_figures(prediction.timeline);
  if (point.grad_accumulation > sampling.simulated) {
    const Prediction shorter =
        predict(request_of(base, point, sampling.simulated - sampling.period),
                {.timeline = options, .simulate = Simulate::Always});
    figures = extrapolate(step_figures(shorter.timeline), figures,
                          (point.grad_accumulation - sampling.simulated) / sampling.period);
  }
  const double tokens = double(point.micro_batch * point.grad_accumulation * point.layout.data) *
                        double(plan.seq_len);
  const double peak = base.cluster.gpu.peak_flops(base.config.precision.precision);
  result.step_time = figures.step_time;
  result.exposed_communication = figures.exposed;
  result.tokens_per_second = tokens / figures.step_time;
  result.model_flops_per_gpu = figures.model_flops / figures.step_time;
  result.mfu = peak > 0 ? result.model_flops_per_gpu / peak : 0;
  return result;
}

SweepReport run_sweep(const PlanRequest& base, const SweepSpace& space,
                      const TimelineOptions& options, const SweepProgress& progress) {
  SweepReport report;
  report.train_batch_size = sweep_train_batch(base);
  if (report.train_batch_size % base.dp_size == 0)
    report.batch_per_rank = report.train_batch_size / base.dp_size;
  SweepEnumeration enumeration = enumerate_sweep(base, space, report.notes);
  const std::vector<SweepPoint>& points = enumeration.points;
  report.families = std::move(enumeration.families);
  report.enumerated = std::int64_t(points.size());
  Outcomes outcomes(points.size());
  outcomes.progress = &progress;
  for_each_chain(chains_of(points), space.threads, [&](const Chain& chain) {
    evaluate_chain(base, points, chain, space, options, outcomes);
  });
  collect(report, points, outcomes);
  if (report.evaluated == 0 && outcomes.first_refusal)
    std::rethrow_exception(outcomes.first_refusal);
  std::stable_sort(report.results.begin(), report.results.end(), faster);
  mark_pareto_front(report.results);
  judge_families(report.families, report.results);
  return report;
}

}  // namespace zerolens
