#include "exec/run/training_run.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "exec/comm/interrupt.hpp"
#include "exec/comm/process_groups.hpp"
#include "exec/engine/context.hpp"
#include "exec/engine/zero_engine.hpp"
#include "exec/io/checkpoint.hpp"
#include "exec/model/gpt2_model.hpp"
#include "sim/core/error.hpp"
#include "sim/schedule/memory_replay.hpp"
#include "sim/timeline/timeline.hpp"

namespace zerolens::exec {
namespace {

using Clock = std::chrono::steady_clock;

using Counts = std::array<CollectiveCount, kOpKindCount>;

// What the communicators counted (none for a group this rank is not in).
Counts counts_of(std::initializer_list<const Communicator*> comms) {
  Counts counts{};
  for (const Communicator* comm : comms) {
    if (comm == nullptr) continue;
    for (int kind = 0; kind < kOpKindCount; ++kind) {
      counts[std::size_t(kind)].calls += comm->count(OpKind(kind)).calls;
      counts[std::size_t(kind)].bytes += comm->count(OpKind(kind)).bytes;
    }
  }
  return counts;
}

// Per group, as the plan's CommReport has them: data-parallel (where its Data ops run: the shard
// group under hybrid sharding), tensor-parallel, pipeline, replicate, hpZ's, qgZ's node-local and
// cross-node hops, and the expert-parallel and expert-data-parallel groups.
std::array<Counts, 9> group_counts(const ProcessGroups& groups, const ZeroEngine& engine) {
  return {counts_of({&groups.shard()}),
          counts_of({groups.tensor()}),
          counts_of({groups.pipeline(), groups.embedding()}),
          counts_of({groups.replicate()}),
          counts_of({groups.secondary()}),
          counts_of({engine.node_group()}),
          counts_of({engine.cross_node_group()}),
          counts_of({groups.expert()}),
          counts_of({groups.expert_data()})};
}

std::array<CollectiveCount, kOpKindCount> difference(const std::array<CollectiveCount, kOpKindCount>& after,
                                                     const std::array<CollectiveCount, kOpKindCount>& before) {
  std::array<CollectiveCount, kOpKindCount> delta{};
  for (std::size_t k = 0; k < delta.size(); ++k) {
    delta[k] = {after[k].calls - before[k].calls, after[k].bytes - before[k].bytes};
  }
  return delta;
}

void record_peaks(const MemoryLedger& ledger, TrainingResult& result) {
  for (int d = 0; d < kDeviceCount; ++d) {
    const Device device = Device(d);
    const CategoryBytes highs = ledger.category_highs(device);
    for (int c = 0; c < kCategoryCount; ++c) {
      Bytes& high = result.category_high[std::size_t(d)][std::size_t(c)];
      high = std::max(high, highs[std::size_t(c)]);
    }
    if (ledger.peak(device) < result.peak[std::size_t(d)]) continue;
    result.peak[std::size_t(d)] = ledger.peak(device);
    result.at_peak[std::size_t(d)] = ledger.categories_at_peak(device);
  }
}

// What `zerolens check-measured` holds a recorded run to, in the trace's optional summary keys.
std::array<TraceCollective, kOpKindCount> trace_counts(const Counts& counts) {
  std::array<TraceCollective, kOpKindCount> collectives{};
  for (std::size_t k = 0; k < collectives.size(); ++k)
    collectives[k] = {counts[k].calls, counts[k].bytes};
  return collectives;
}

void record_counts(const TrainingResult& result, const Plan& plan, TraceSummary& summary) {
  summary.category_highs = result.category_high;
  summary.collectives = trace_counts(result.collectives);
  // The other groups' counts where the plan has such groups (traces of plain ZeRO runs stay as
  // they were).
  if (plan.request.config.tensor_parallel.active())
    summary.tensor_parallel_collectives = trace_counts(result.tensor_parallel_collectives);
  if (plan.request.config.pipeline.active())
    summary.pipeline_collectives = trace_counts(result.pipeline_collectives);
  if (plan.schedule.context.replicas() > 1)
    summary.replicate_collectives = trace_counts(result.replicate_collectives);
  if (plan.schedule.context.hpz_group > 0)
    summary.hpz_collectives = trace_counts(result.hpz_collectives);
  if (plan.schedule.context.quantized_gradients) {
    summary.node_collectives = trace_counts(result.node_collectives);
    summary.cross_node_collectives = trace_counts(result.cross_node_collectives);
  }
  if (plan.schedule.context.expert_parallel > 1) {
    summary.expert_parallel_collectives = trace_counts(result.expert_parallel_collectives);
    summary.expert_data_collectives = trace_counts(result.expert_data_collectives);
  }
  summary.link_bytes = TraceLinkBytes{result.links.pcie_h2d, result.links.pcie_d2h, result.links.nvme_read,
                                      result.links.nvme_write};
}

// The fastest stretch of `window` consecutive steps, followed step by step: a ring of the last
// `window` steps' times and ops.
class StretchTracker {
 public:
  StretchTracker(std::size_t steps, std::size_t window)
      : skip_first_(steps > 1),
        window_(std::max<std::size_t>(1, std::min(window, steps - (steps > 1 ? 1 : 0)))) {}

  void add(std::size_t index, double seconds, const std::vector<OpRecord>& ops,
           TrainingResult& result) {
    if (skip_first_ && index == 0) return;
    if (ring_.size() < window_) ring_.resize(window_);
    ring_[filled_ % window_] = {index, seconds, ops};
    if (++filled_ < window_) return;
    double sum = 0;
    for (const Entry& entry : ring_) sum += entry.seconds;
    const double mean = sum / double(window_);
    if (result.recorded.count > 0 && mean >= result.recorded.seconds) return;
    const Entry* nearest = &ring_.front();
    for (const Entry& entry : ring_) {
      if (std::abs(entry.seconds - mean) < std::abs(nearest->seconds - mean)) nearest = &entry;
    }
    result.recorded = {
        .seconds = mean, .first = index + 1 - window_, .count = window_, .step = nearest->index};
    result.recorded_ops = nearest->ops;
  }

 private:
  struct Entry {
    std::size_t index = 0;
    double seconds = 0;
    std::vector<OpRecord> ops;
  };
  bool skip_first_;
  std::size_t window_;
  std::size_t filled_ = 0;
  std::vector<Entry> ring_;
};

Gpt2Options gpt2_options(const Plan& plan, std::uint64_t seed, int tensor_parallel_rank) {
  const ScheduleContext& context = plan.schedule.context;
  return {.micro_batch = context.micro_batch,
          .seq_len = context.seq_len,
          .checkpointing = context.activation_checkpointing,
          .seed = seed,
          .activation_element_bytes = plan.request.config.precision.param_bytes(),
          .tensor_parallel_rank = tensor_parallel_rank};
}

// Checkpoints hold one rank's ZeRO partition of the whole model; a TP shard's or a pipeline
// stage's are not written or read yet, nor a hybrid-sharded run's (whose shard groups hold the
// same partitions).
void require_checkpointable(const Plan& plan, const TrainingOptions& options) {
  const TrainingConfig& config = plan.request.config;
  const bool hybrid = plan.schedule.context.replicas() > 1;
  const bool experts = plan.schedule.layout.expert_dp_size > 0;
  if (!config.tensor_parallel.active() && !config.pipeline.active() && !hybrid && !experts) return;
  const char* flag = !options.save_directory.empty() ? "--save"
                     : !options.resume_from.empty()  ? "--resume"
                                                     : nullptr;
  if (flag == nullptr) return;
  const char* what = hybrid    ? "hybrid-sharded"
                     : experts ? "expert-parallel"
                               : "tensor- or pipeline-parallel";
  throw InputError(flag, std::string("checkpoints of ") + what +
                             " runs are not written or read yet (docs/executor.md)");
}

}  // namespace

void check_trainable(const Plan& plan) {
  require_runnable_sharding(plan);
  const Model& model = plan.request.model;
  if (model.trainable_parameter_count() < model.parameter_count()) {
    throw InputError("--lora-rank",
                     "zerolens run trains every parameter of its GPT-2; LoRA and "
                     "QLoRA are planned (zerolens plan, trace, sweep), not run");
  }
  const int stages = std::max<int>(1, int(plan.pipeline_stages.size()));
  for (int stage = 0; stage < stages; ++stage)
    gpt2_layout(rank_model(plan, stage), gpt2_options(plan, 0, 0));
}

void check_runnable(const Plan& plan, const TrainingOptions& options, int processes) {
  check_trainable(plan);
  check_engine_supports(plan);  // what is not run at all, before how many processes would run it
  ProcessGroups::require_processes(plan.schedule.context.parallel_shape(), processes);
  require_checkpointable(plan, options);
}

TrainingResult train_gpt2(const Plan& plan, Communicator& comm, const TrainingOptions& options,
                          const std::function<void(const StepRecord&)>& on_step) {
  require_checkpointable(plan, options);
  MemoryLedger ledger;
  ledger.place(Device::Gpu, comm.memory_space());
  const auto groups = std::make_shared<const ProcessGroups>(comm, plan.schedule.context);
  const RankPlace place = groups->place();
  Gpt2Options gpt2 = gpt2_options(plan, options.seed, place.tensor);
  // A MoE model's share holds its EP rank's experts (the engine connects the group to the model).
  if (groups->expert() != nullptr) gpt2.expert_parallel_rank = groups->expert()->rank();
  const Model& shard = rank_model(plan, place.stage);
  const std::unique_ptr<LayerModel> model = options.make_model
                                                ? options.make_model(shard, gpt2, ledger)
                                                : std::make_unique<Gpt2Model>(shard, gpt2, ledger);
  ZeroEngine engine(plan, groups, *model, ledger);
  TrainingResult result;
  result.pipeline_stage = place.stage;
  if (!options.resume_from.empty()) {
    const FullState state = load_checkpoint(resolve_checkpoint(options.resume_from));
    engine.restore(state);
    result.first_step = state.meta.step;
    if (result.first_step >= options.steps) {
      throw InputError("--steps", "the checkpoint has taken " + std::to_string(result.first_step) +
                                      " steps already; ask for more than that");
    }
  }
  std::vector<OpRecord> ops(rank_schedule(plan, place.stage).ops.size());
  StretchTracker stretch(std::size_t(options.steps - result.first_step), kStepWindow);
  for (std::int64_t step = result.first_step; step < options.steps; ++step) {
    // SIGINT/SIGTERM: unwind, so that the engine removes its swap files (and a save its partial
    // directory); the collectives poll too (exec/comm/interrupt.hpp).
    throw_if_interrupted();
    set_current_step(step);
    ledger.reset_peaks();
    const auto counts_before = group_counts(*groups, engine);
    const LinkBytes links_before = engine.link_bytes();
    const auto start = Clock::now();
    const StepReport report = engine.step(step, [&](std::size_t op, double begin, double end) {
      ops[op].start = begin;
      ops[op].duration = end - begin;
      for (int d = 0; d < kDeviceCount; ++d) ops[op].memory_after[std::size_t(d)] = ledger.current(Device(d));
      throw_if_interrupted();  // after every op: a signal ends the run within an op's time
    });
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const auto counts_after = group_counts(*groups, engine);
    result.collectives = difference(counts_after[0], counts_before[0]);
    result.tensor_parallel_collectives = difference(counts_after[1], counts_before[1]);
    result.pipeline_collectives = difference(counts_after[2], counts_before[2]);
    result.replicate_collectives = difference(counts_after[3], counts_before[3]);
    result.hpz_collectives = difference(counts_after[4], counts_before[4]);
    result.node_collectives = difference(counts_after[5], counts_before[5]);
    result.cross_node_collectives = difference(counts_after[6], counts_before[6]);
    result.expert_parallel_collectives = difference(counts_after[7], counts_before[7]);
    result.expert_data_collectives = difference(counts_after[8], counts_before[8]);
    const LinkBytes links = engine.link_bytes();
    result.links = {links.pcie_h2d - links_before.pcie_h2d, links.pcie_d2h - links_before.pcie_d2h,
                    links.nvme_read - links_before.nvme_read, links.nvme_write - links_before.nvme_write};
    record_peaks(ledger, result);
    result.steps.push_back({step, report.loss, report.grad_norm, seconds, report.loss_scale, report.skipped});
    stretch.add(result.steps.size() - 1, seconds, ops, result);
    if (on_step) on_step(result.steps.back());
    const bool last = step + 1 == options.steps;
    if (!options.save_directory.empty() && (last || (options.save_every > 0 && (step + 1) % options.save_every == 0))) {
      result.checkpoints.push_back(
          save_checkpoint(options.save_directory, engine.checkpoint_meta(), engine.checkpoint_shard(), comm).string());
    }
  }
  return result;
}

int recording_rank(const Plan& plan) {
  return rank_at({.stage = plan.pipeline_stage}, plan.schedule.context.parallel_shape());
}

Trace measured_trace(const Plan& plan, const TrainingResult& result) {
  if (result.pipeline_stage != plan.pipeline_stage) {
    Plan stage = plan;
    stage.pipeline_stage = result.pipeline_stage;
    stage.schedule = rank_schedule(plan, result.pipeline_stage);
    stage.rank_model = rank_model(plan, result.pipeline_stage);
    stage.comm = summarize_comm(stage.schedule);
    return measured_trace(stage, result);
  }
  Timeline timeline;
  for (const OpRecord& op : result.recorded_ops)
    timeline.ops.push_back({.start = op.start, .duration = op.duration});
  Trace trace = make_trace(plan, timeline, 1);
  trace.source = "exec";
  const double step_time = result.recorded.seconds;
  const StepRates rates = step_rates(plan.schedule, step_time);  // as the timeline counts them
  trace.summary = {.step_time = step_time,
                   .tokens_per_second = rates.tokens_per_second,
                   .model_flops_per_gpu = rates.model_flops_per_gpu,
                   .mfu = 0,  // no peak FLOP/s is known for the CPU device backend
                   .exposed_communication = 0,
                   .peak = result.peak};
  for (std::size_t i = 0; i < trace.ops.size(); ++i)
    trace.ops[i].memory_after = result.recorded_ops[i].memory_after;
  record_counts(result, plan, trace.summary);
  return trace;
}

}  // namespace zerolens::exec
