// What the simulator's CPU-rank model needs beyond the host rates (docs/calibrate.md, "The CPU
// backend's own costs"): collectives per group size, the executor's GPT-2 layers over a grid of
// shapes fitted per layer kind and direction, and the engine's own work per op kind on one rank.
// Ranks that do not take part in a measurement wait in an idle barrier (asleep, taking no core).
// The costs are one rank's with the node to itself; the occupancy factors say how they grow when
// more ranks share it (the engine's step in lock step, as ranks in step wait for the slowest).
// Every time is a mean over the fastest stretch of consecutive runs, as the executor's step time is
// measured.
#include "exec/run/calibrate_executor.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "exec/calibrate/calibrate_support.hpp"
#include "exec/engine/zero_engine.hpp"
#include "exec/memory/memory_ledger.hpp"
#include "exec/model/gpt2_model.hpp"
#include "exec/run/training_run.hpp"
#include "sim/model/presets.hpp"
#include "sim/plan/plan.hpp"
#include "sim/schedule/comm.hpp"
#include "sim/timeline/cpu_ranks.hpp"

namespace zerolens::exec {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Per column, the mean over the `window` consecutive rows (rounds, steps) whose summed time is
// lowest: the executor's step time is measured the same way (kStepWindow, training_run.hpp), so a
// cost calibrate measures and a step it predicts stand on the same footing, neither the best single
// run nor one slowed by a burst of other load.
std::vector<double> stretch_means(const std::vector<std::vector<double>>& rows,
                                  std::size_t window) {
  if (rows.empty()) return {};
  window = std::max<std::size_t>(1, std::min(window, rows.size()));
  std::size_t best = 0;
  double best_sum = std::numeric_limits<double>::infinity();
  for (std::size_t first = 0; first + window <= rows.size(); ++first) {
    double sum = 0;
    for (std::size_t r = first; r < first + window; ++r) {
      for (const double seconds : rows[r]) sum += seconds;
    }
    if (sum < best_sum) {
      best_sum = sum;
      best = first;
    }
  }
  std::vector<double> means(rows.front().size(), 0);
  for (std::size_t r = best; r < best + window; ++r) {
    for (std::size_t c = 0; c < means.size(); ++c) means[c] += rows[r][c] / double(window);
  }
  return means;
}

// ---- the executor's layers ----------------------------------------------------------------------

// GPT-2 of `layers` blocks at a grid shape (ffn 4 x hidden, no dropout: the executor has none).
Model grid_model(const CalibrateLayerShape& s, int layers) {
  TransformerShape shape = *model_from_preset("gpt2-tiny").shape;
  shape.layers = layers;
  shape.hidden = s.hidden;
  shape.heads = shape.kv_heads = s.heads;
  shape.ffn_hidden = 4 * s.hidden;
  shape.vocab = s.vocab;
  shape.max_positions = std::max<std::int64_t>(s.seq_len, shape.max_positions);
  shape.dropout = 0;
  return build_transformer("calibrate", shape);
}

// One GPT-2 of a single block at a grid shape, its parameters and gradients, and the best time of
// each layer's forward and backward.
class LayerBench {
 public:
  explicit LayerBench(const CalibrateLayerShape& shape)
      : shape_(shape), model_(grid_model(shape, 1)) {
    net_ = std::make_unique<Gpt2Model>(model_,
                                       Gpt2Options{.micro_batch = shape.micro_batch,
                                                   .seq_len = shape.seq_len,
                                                   .activation_element_bytes = 2},
                                       ledger_);
    std::int32_t tensor = 0;
    params_.resize(model_.layers.size());
    grads_.resize(model_.layers.size());
    for (std::size_t l = 0; l < model_.layers.size(); ++l) {
      for (const TensorSpec& spec : model_.layers[l].params) {
        params_[l].emplace_back(std::size_t(spec.numel()));
        grads_[l].emplace_back(std::size_t(spec.numel()));
        net_->init_tensor(tensor++, params_[l].back());
      }
    }
  }

  // One micro-batch: every forward, then every backward, each timed into `row` (forward then
  // backward of each layer, in layer order).
  void run(std::int64_t sample, std::vector<double>& row) {
    net_->load_batch(sample, shape_.micro_batch);
    const std::size_t layers = model_.layers.size();
    const std::size_t first = row.size();
    row.resize(first + 2 * layers);
    for (std::size_t l = 0; l < layers; ++l) {
      const auto params = param_views(l);
      const auto start = Clock::now();
      net_->forward(l, params);
      row[first + 2 * l] = seconds_since(start);
    }
    for (std::size_t l = layers; l-- > 0;) {
      const auto params = param_views(l);
      const auto grads = grad_views(l);
      const auto start = Clock::now();
      net_->backward(l, params, grads, 1.0f);
      row[first + 2 * l + 1] = seconds_since(start);
    }
  }

  // The layers' timings, their seconds taken from `means` (laid out as run() writes a row) from
  // `next` on; returns where the next bench's start.
  std::size_t add_timings(const std::vector<double>& means, std::size_t next,
                          std::vector<LayerTiming>& out) const {
    for (std::size_t l = 0; l < model_.layers.size(); ++l) {
      const Layer& layer = model_.layers[l];
      for (const bool backward : {false, true}) {
        out.push_back({shape_, layer.kind, backward,
                       layer_work(layer, shape_.micro_batch, shape_.seq_len, backward),
                       means[next++]});
      }
    }
    return next;
  }

 private:
  std::size_t owner(std::size_t layer) const {
    const int shared = model_.layers[layer].shares_params_of;
    return shared >= 0 ? std::size_t(shared) : layer;
  }
  std::vector<std::span<const float>> param_views(std::size_t layer) const {
    std::vector<std::span<const float>> views;
    for (const auto& p : params_[owner(layer)]) views.emplace_back(p);
    return views;
  }
  std::vector<std::span<float>> grad_views(std::size_t layer) {
    std::vector<std::span<float>> views;
    for (auto& g : grads_[owner(layer)]) views.emplace_back(g);
    return views;
  }

  CalibrateLayerShape shape_;
  Model model_;
  MemoryLedger ledger_;
  std::unique_ptr<Gpt2Model> net_;
  std::vector<std::vector<std::vector<float>>> params_, grads_;
};

// The features a layer kind's cost is fitted on: blocks have all three, the head no attention,
// the embedding and final norm only elements.
std::vector<double> features_of(LayerKind kind, const LayerWork& w) {
  switch (kind) {
    case LayerKind::TransformerBlock:
      return {w.matmul_flops, w.attention_flops, w.elements};
    case LayerKind::LmHead:
      return {w.matmul_flops, 0, w.elements};
    default:
      return {0, 0, w.elements};
  }
}

void fit_layers(Calibration& result) {
  for (int k = 0; k < kLayerKindCount; ++k) {
    for (const bool backward : {false, true}) {
      std::vector<std::vector<double>> features;
      std::vector<double> seconds;
      for (const LayerTiming& t : result.layer_timings) {
        if (int(t.kind) != k || t.backward != backward || !(t.seconds > 0) ||
            !std::isfinite(t.seconds))
          continue;
        features.push_back(features_of(t.kind, t.work));
        seconds.push_back(t.seconds);
      }
      if (seconds.empty()) continue;
      // Features a kind does not have are all zero: dropped from the fit (their cost stays 0).
      std::vector<std::size_t> present;
      for (std::size_t j = 0; j < 3; ++j) {
        if (std::any_of(features.begin(), features.end(), [&](const auto& f) { return f[j] > 0; }))
          present.push_back(j);
      }
      std::vector<std::vector<double>> used(features.size());
      for (std::size_t i = 0; i < features.size(); ++i) {
        for (const std::size_t j : present) used[i].push_back(features[i][j]);
      }
      const std::vector<double> fit = fit_nonnegative(used, seconds);
      double cost[3] = {0, 0, 0};
      for (std::size_t p = 0; p < present.size(); ++p) cost[present[p]] = fit[p];
      LayerCost& out =
          backward ? result.layer_backward[std::size_t(k)] : result.layer_forward[std::size_t(k)];
      out = {cost[0], cost[1], cost[2]};
    }
  }
}

void measure_layers(const CalibrateOptions& options, Calibration& result) {
  std::vector<std::unique_ptr<LayerBench>> benches;
  for (const CalibrateLayerShape& shape : options.layer_shapes)
    benches.push_back(std::make_unique<LayerBench>(shape));
  // Round after round over the whole grid for the given time; each layer's time is its mean over
  // the fastest stretch of consecutive rounds (stretch_means).
  const auto start = Clock::now();
  std::vector<std::vector<double>> rounds;
  do {
    std::vector<double> row;
    for (const auto& bench : benches) bench->run(std::int64_t(rounds.size()) * 64, row);
    rounds.push_back(std::move(row));
  } while (seconds_since(start) < options.layer_seconds || rounds.size() < 2);
  rounds.erase(rounds.begin());  // the first round pays for first touches
  const std::vector<double> means = stretch_means(rounds, kStepWindow);
  result.layer_timings.clear();
  std::size_t next = 0;
  for (const auto& bench : benches) next = bench->add_timings(means, next, result.layer_timings);
}

// ---- the engine's own work ----------------------------------------------------------------------

// A reference plan of the engine on one rank: GPT-2 of `engine_shape`, two blocks, the optimizer
// states and (stage 3) the parameters where `optimizer` and `params` say.
Plan reference_plan(const CalibrateOptions& options, int stage, Precision precision,
                    OffloadDevice optimizer = OffloadDevice::None,
                    OffloadDevice params = OffloadDevice::None,
                    const CalibrateLayerShape* shape = nullptr) {
  const CalibrateLayerShape& s = shape ? *shape : options.engine_shape;
  PlanRequest request;
  request.model = grid_model(s, 2);
  TrainingConfig& c = request.config;
  c.zero.stage = stage;
  c.precision.precision = precision;
  c.zero.offload_optimizer.device = optimizer;
  if (optimizer == OffloadDevice::Nvme) {
    c.zero.offload_optimizer.nvme_path = options.nvme_path.value_or("");
    c.zero.sub_group_size = 32768;  // several sub-groups, each swapped in one request
  }
  if (params != OffloadDevice::None) {
    // Every layer's partitions read before its use (no persistent tensor), every tensor's written
    // back after the update, each a request.
    c.zero.offload_param.device = params;
    c.zero.offload_param.nvme_path = options.nvme_path.value_or("");
    c.zero.offload_param.buffer_size = Elements{1} << 17;  // 5 buffers hold the whole model
    c.zero.stage3_param_persistence_threshold = 0;
  }
  c.batch.micro_batch_per_gpu = s.micro_batch;
  c.seq_len = s.seq_len;
  c.zero.reduce_bucket_size = 500000;  // as `zerolens run` plans
  request.dp_size = 1;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), 1, 1);  // memory only
  request.options.cuda_context_bytes = 0;
  request.options.library_workspace_bytes = 0;
  request.options.allocator = {.kind = AllocatorKind::Flat};  // memory only; not timed
  return make_plan(std::move(request));
}

// Each op's mean time over the fastest stretch of consecutive steps (stretch_means), stepping for
// `seconds` (at least kStepWindow + 1 steps; the first left out: it pays for first touches). With
// `lock`, every member of it steps its own engine at once, as ranks in step share the node: a
// barrier before each step and after each collective op (where the ranks of one engine would wait
// for each other; a one-rank engine's collectives wait for nobody), rank 0's clock deciding when
// all stop.
std::vector<double> op_times(const Plan& plan, Communicator& alone, double seconds,
                             Communicator* lock = nullptr) {
  MemoryLedger ledger;
  const ScheduleContext& context = plan.schedule.context;
  Gpt2Model model(plan.request.model,
                  {.micro_batch = context.micro_batch,
                   .seq_len = context.seq_len,
                   .activation_element_bytes = plan.request.config.precision.param_bytes()},
                  ledger);
  ZeroEngine engine(plan, alone, model, ledger);
  std::vector<std::vector<double>> steps;
  const auto start = Clock::now();
  const auto going = [&](std::int64_t step) {
    const bool more = step <= std::int64_t(kStepWindow) || seconds_since(start) < seconds;
    if (!lock) return more;
    return lock->all_reduce_max(lock->rank() == 0 && more ? 1.0 : 0.0) > 0;
  };
  for (std::int64_t step = 0; going(step); ++step) {
    if (lock) lock->barrier();
    std::vector<double> row(plan.schedule.ops.size(), 0);
    engine.step(step, [&](std::size_t op, double begin, double end) {
      row[op] = end - begin;
      // Where ranks of one engine would meet in a collective, the members meet too (untimed).
      if (lock && is_collective(plan.schedule.ops[op].kind)) lock->barrier();
    });
    if (step > 0) steps.push_back(std::move(row));
  }
  return stretch_means(steps, kStepWindow);
}

// Seconds per unit: the summed times of the plan's ops of `kind` (on `stream`, when given)
// over their summed sizes.
double per_unit(const Plan& plan, const std::vector<double>& times, OpKind kind,
                const std::function<double(const Op&)>& size, std::optional<Stream> stream = {}) {
  double seconds = 0, units = 0;
  for (std::size_t i = 0; i < plan.schedule.ops.size(); ++i) {
    const Op& op = plan.schedule.ops[i];
    if (op.kind != kind || (stream && op.stream != *stream)) continue;
    seconds += times[i];
    units += size(op);
  }
  return units > 0 ? seconds / units : 0;
}

// The reference step (stage 0, bf16) of one-rank engines, one on each member, in lock step (a
// barrier before each step; a step lasts as long as its slowest rank's) for occupancy_seconds: the
// mean step over the fastest stretch of consecutive steps (the first left out). Members only.
double lock_step(Communicator& members, const CalibrateOptions& options) {
  const Plan plan = reference_plan(options, 0, Precision::Bf16);
  const std::unique_ptr<Communicator> alone = members.alone();
  MemoryLedger ledger;
  const ScheduleContext& context = plan.schedule.context;
  Gpt2Model model(plan.request.model,
                  {.micro_batch = context.micro_batch,
                   .seq_len = context.seq_len,
                   .activation_element_bytes = 2},
                  ledger);
  ZeroEngine engine(plan, *alone, model, ledger);
  std::vector<std::vector<double>> steps;
  const auto start = Clock::now();
  for (bool more = true; more;) {
    members.barrier();
    const auto begin = Clock::now();
    engine.step(std::int64_t(steps.size()));
    steps.push_back({members.all_reduce_max(seconds_since(begin))});
    // Rank 0's clock decides, so every member stops after the same step.
    const bool going = members.rank() == 0 && seconds_since(start) < options.occupancy_seconds;
    more = members.all_reduce_max(going ? 1.0 : 0.0) > 0 || steps.size() <= kStepWindow;
  }
  steps.erase(steps.begin());  // the first step pays for first touches
  return stretch_means(steps, kStepWindow).front();
}

// What the engine's NVMe requests cost beyond their bytes at the node's rates, in its own steps on
// every member at once, in lock step, as ranks swap in theirs; the slowest member's figures (the
// step's next collective waits for that rank), members only. A read is waited for by the op that
// needs it, and a parameter write is waited for at the NvmeWrite after the update that issues it,
// so an op's time beyond its own work counts for the request:
//  - an optimizer sub-group (stage 3, the optimizer swapped per sub-group, the parameters in host
//    memory): its read op and its update less the host optimizer's work (`share` times its cost
//    alone); its write op;
//  - a tensor partition (the optimizer in host memory, the parameters swapped per tensor): a
//    layer's read op and its host-to-device copy less the copy's work; the update less the host
//    optimizer's work and the write-back op, over the tensors written.
// The two apart: a parameter swap's many small requests would otherwise be counted in the
// sub-groups' (the drive serves them side by side). The parameter swap is measured on two models,
// the engine's shape and the grid's smallest, the same number of tensors of different sizes, so
// that its cost is fitted as a cost per request and one per byte (small O_DIRECT requests do not
// stream at the rate of the large pieces the node's rates were measured with).
NvmeRequestCosts measure_nvme_requests(const CalibrateOptions& options, Communicator& members,
                                       double share, const Calibration& result) {
  const NvmeRate& nvme = *result.nvme;
  const EngineCosts& e = result.engine;
  const double ranks = members.size();
  const std::unique_ptr<Communicator> alone = members.alone();
  const double seconds = options.engine_seconds / 8;
  // One plan's seconds beyond the bytes, requests and bytes, for its reads and its writes.
  struct Beyond {
    std::array<double, 2> seconds{}, requests{}, bytes{};
  };
  const auto measure = [&](const Plan& plan, bool tensors) {
    const std::vector<double> times = op_times(plan, *alone, seconds, &members);
    Beyond b;
    for (std::size_t i = 0; i < plan.schedule.ops.size(); ++i) {
      const Op& op = plan.schedule.ops[i];
      const double t = times[i];
      if (op.kind == OpKind::NvmeRead || op.kind == OpKind::NvmeWrite) {
        const std::size_t k = op.kind == OpKind::NvmeWrite;
        const double rate = k ? nvme.overwrite_bytes_per_second : nvme.read_bytes_per_second;
        b.seconds[k] += t - double(op.bytes) * ranks / rate;
        b.requests[k] += op.io_requests;
        b.bytes[k] += double(op.bytes);
      } else if (op.kind == OpKind::OptimizerStep) {
        b.seconds[tensors] +=
            t - share * e.host_optimizer_per_byte * double(op.memory_bytes_touched);
      } else if (op.kind == OpKind::CopyH2D && tensors && op.phase != Phase::Optimizer) {
        b.seconds[0] += t - share * e.copy_per_byte * double(op.bytes);
      }
    }
    return b;
  };
  const Beyond groups = measure(
      reference_plan(options, 3, Precision::Bf16, OffloadDevice::Nvme, OffloadDevice::Cpu), false);
  const CalibrateLayerShape small = smallest_shape(options);
  std::vector<Beyond> swaps;
  for (const CalibrateLayerShape* shape : {&options.engine_shape, &small}) {
    swaps.push_back(measure(
        reference_plan(options, 3, Precision::Bf16, OffloadDevice::Cpu, OffloadDevice::Nvme, shape),
        true));
  }
  // The slowest member's: the step's next collective waits for it.
  const auto slowest = [&](double mine) { return members.all_reduce_max(std::max(0.0, mine)); };
  const auto per_request = [&](std::size_t k) {
    return slowest(groups.requests[k] > 0 ? groups.seconds[k] / groups.requests[k] : 0.0);
  };
  NvmeRequestCosts costs{
      .ranks = members.size(), .read_latency = per_request(0), .write_latency = per_request(1)};
  for (const std::size_t k : {0u, 1u}) {
    const RequestCost fit = fit_request_cost({swaps[0].requests[k], swaps[1].requests[k]},
                                             {swaps[0].bytes[k], swaps[1].bytes[k]},
                                             {swaps[0].seconds[k], swaps[1].seconds[k]});
    (k ? costs.tensor_write_latency : costs.tensor_read_latency) = slowest(fit.per_request);
    (k ? costs.tensor_write_per_byte : costs.tensor_read_per_byte) = slowest(fit.per_byte);
  }
  return costs;
}

// In a step a layer costs more than alone over the grid: the step's other data has taken the
// caches, its allocations come between. Per layer kind and direction, the reference step's layer
// ops over what the fitted costs give them; the costs are scaled by it (Calibration::in_step).
void apply_in_step(const Plan& plan, const std::vector<double>& times, Calibration& result) {
  const ScheduleContext& context = plan.schedule.context;
  std::array<std::array<double, 2>, kLayerKindCount> measured{}, fitted{};
  for (std::size_t i = 0; i < plan.schedule.ops.size(); ++i) {
    const Op& op = plan.schedule.ops[i];
    if (op.kind != OpKind::Forward && op.kind != OpKind::Backward) continue;
    const bool backward = op.kind == OpKind::Backward;
    const Layer& layer = plan.request.model.layers[std::size_t(op.layer)];
    const auto k = std::size_t(layer.kind);
    const LayerCost& cost = backward ? result.layer_backward[k] : result.layer_forward[k];
    measured[k][backward] += times[i];
    fitted[k][backward] +=
        layer_seconds(layer_work(layer, context.micro_batch, context.seq_len, backward), cost);
  }
  for (std::size_t k = 0; k < measured.size(); ++k) {
    for (const bool backward : {false, true}) {
      if (!(fitted[k][backward] > 0)) continue;
      const double factor = measured[k][backward] / fitted[k][backward];
      LayerCost& cost = backward ? result.layer_backward[k] : result.layer_forward[k];
      cost = {cost.per_matmul_flop * factor, cost.per_attention_flop * factor,
              cost.per_element * factor};
      result.in_step[k][backward] = factor;
    }
  }
}

void measure_engine(const CalibrateOptions& options, Communicator& alone, Calibration& result) {
  const auto bytes = [](const Op& op) { return double(op.bytes); };
  const auto touched = [](const Op& op) { return double(op.memory_bytes_touched); };
  const double each = options.engine_seconds / 4;
  EngineCosts& e = result.engine;
  {
    const Plan plan = reference_plan(options, 0, Precision::Bf16);
    const std::vector<double> times = op_times(plan, alone, each);
    e.all_reduce_per_byte = per_unit(plan, times, OpKind::AllReduce, bytes);
    apply_in_step(plan, times, result);
  }
  {
    const Plan plan = reference_plan(options, 2, Precision::Bf16);
    const std::vector<double> times = op_times(plan, alone, each);
    const double owned = double(plan.schedule.layout.owned);
    e.reduce_scatter_per_byte = per_unit(plan, times, OpKind::ReduceScatter, bytes);
    e.all_gather_per_byte = per_unit(plan, times, OpKind::AllGather, bytes);
    e.norm_per_element = per_unit(plan, times, OpKind::GradNorm, [&](const Op&) { return owned; });
    e.mixed_optimizer_per_byte = per_unit(plan, times, OpKind::OptimizerStep, touched);
  }
  {
    const Plan plan = reference_plan(options, 2, Precision::Fp32);
    const std::vector<double> times = op_times(plan, alone, each);
    e.optimizer_per_byte = per_unit(plan, times, OpKind::OptimizerStep, touched);
    e.reduce_scatter_fp32_per_byte = per_unit(plan, times, OpKind::ReduceScatter, bytes);
    e.all_gather_fp32_per_byte = per_unit(plan, times, OpKind::AllGather, bytes);
  }
  {
    const Plan plan = reference_plan(options, 0, Precision::Fp32);
    e.all_reduce_fp32_per_byte =
        per_unit(plan, op_times(plan, alone, each), OpKind::AllReduce, bytes);
  }
  {
    const Plan plan = reference_plan(options, 2, Precision::Bf16, OffloadDevice::Cpu);
    const std::vector<double> times = op_times(plan, alone, each);
    e.host_optimizer_per_byte = per_unit(plan, times, OpKind::OptimizerStep, touched, Stream::Cpu);
    const double copies = per_unit(plan, times, OpKind::CopyD2H, bytes) +
                          per_unit(plan, times, OpKind::CopyH2D, bytes);
    const bool both = per_unit(plan, times, OpKind::CopyD2H, bytes) > 0 &&
                      per_unit(plan, times, OpKind::CopyH2D, bytes) > 0;
    e.copy_per_byte = both ? copies / 2 : copies;
  }
}

// ---- sending rank 0's figures to every rank -----------------------------------------------------

void share(Communicator& comm, std::vector<double>& values) {
  std::vector<float> wide(values.size() * 2);  // each double as two floats: hi + lo
  for (std::size_t i = 0; i < values.size(); ++i) {
    wide[2 * i] = float(values[i]);
    wide[2 * i + 1] = float(values[i] - double(wide[2 * i]));
  }
  comm.broadcast(wide, 0);
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = double(wide[2 * i]) + double(wide[2 * i + 1]);
}

double grid_seconds(const Calibration& c) {
  double seconds = 0;
  for (const LayerTiming& timing : c.layer_timings) seconds += timing.seconds;
  return seconds;
}

std::vector<double> flatten(const Calibration& c) {
  std::vector<double> v;
  for (const auto* costs : {&c.layer_forward, &c.layer_backward}) {
    for (const LayerCost& cost : *costs)
      v.insert(v.end(), {cost.per_matmul_flop, cost.per_attention_flop, cost.per_element});
  }
  const EngineCosts& e = c.engine;
  v.insert(v.end(), {e.all_reduce_per_byte, e.reduce_scatter_per_byte, e.all_gather_per_byte,
                     e.all_reduce_fp32_per_byte, e.reduce_scatter_fp32_per_byte,
                     e.all_gather_fp32_per_byte, e.norm_per_element, e.optimizer_per_byte,
                     e.mixed_optimizer_per_byte, e.host_optimizer_per_byte, e.copy_per_byte});
  for (const GroupCollectives& g : c.group_collectives) {
    v.insert(v.end(), {double(g.ranks), g.latency, g.bandwidth, g.sixteen_bit_reduce_latency,
                       g.sixteen_bit_reduce_bandwidth});
  }
  for (const Occupancy& o : c.occupancy) v.push_back(o.factor);
  v.push_back(c.reference_step_seconds);
  for (const NvmeRequestCosts& n : c.nvme_requests) {
    v.insert(v.end(), {double(n.ranks), n.read_latency, n.write_latency, n.tensor_read_latency,
                       n.tensor_write_latency, n.tensor_read_per_byte, n.tensor_write_per_byte});
  }
  return v;
}

void unflatten(const std::vector<double>& v, Calibration& c) {
  std::size_t i = 0;
  for (auto* costs : {&c.layer_forward, &c.layer_backward}) {
    for (LayerCost& cost : *costs) cost = {v[i], v[i + 1], v[i + 2]}, i += 3;
  }
  EngineCosts& e = c.engine;
  for (double* field :
       {&e.all_reduce_per_byte, &e.reduce_scatter_per_byte, &e.all_gather_per_byte,
        &e.all_reduce_fp32_per_byte, &e.reduce_scatter_fp32_per_byte, &e.all_gather_fp32_per_byte,
        &e.norm_per_element, &e.optimizer_per_byte, &e.mixed_optimizer_per_byte,
        &e.host_optimizer_per_byte, &e.copy_per_byte}) {
    *field = v[i++];
  }
  for (GroupCollectives& g : c.group_collectives)
    g = {int(std::lround(v[i])), v[i + 1], v[i + 2], v[i + 3], v[i + 4]}, i += 5;
  for (Occupancy& o : c.occupancy) o.factor = v[i++];
  c.reference_step_seconds = v[i++];
  for (NvmeRequestCosts& n : c.nvme_requests)
    n = {int(std::lround(v[i])), v[i + 1], v[i + 2], v[i + 3], v[i + 4], v[i + 5], v[i + 6]},
    i += 7;
}

}  // namespace

void measure_cpu_backend(Communicator& comm, const CalibrateOptions& options, Calibration& result) {
  // Collectives over every group size 2 .. ranks, the other ranks idle.
  result.group_collectives.clear();
  for (int group = 2; group <= comm.size(); ++group) {
    std::unique_ptr<Communicator> members = comm.first_ranks(group);
    if (members) {
      const std::vector<CollectiveRate> rates =
          measure_collectives(*members, options.message_sizes);
      GroupCollectives fitted = fit_group_collectives(group, rates);
      const GroupCollectives sixteen_bit =
          fit_group_collectives(group, measure_collectives_16bit(*members, options.message_sizes));
      fitted.sixteen_bit_reduce_latency = sixteen_bit.latency;
      fitted.sixteen_bit_reduce_bandwidth = sixteen_bit.bandwidth;
      result.group_collectives.push_back(fitted);
    }
    comm.idle_barrier();
  }
  // Compute on rank 0 with the node to itself (the others asleep): the layers over the grid and the
  // engine on a one-rank communicator of its own.
  // Passes minutes apart catch a shared host at different speeds: the fastest pass (the least
  // grid time) is kept whole, as the executor's recorded step is its fastest stretch.
  if (std::unique_ptr<Communicator> first = comm.first_ranks(1)) {
    on_every_rank(*first, [&] {
      std::optional<Calibration> fastest;
      for (int pass = 0; pass < std::max(1, options.compute_passes); ++pass) {
        Calibration trial = result;
        measure_layers(options, trial);
        fit_layers(trial);
        measure_engine(options, *first, trial);
        if (!fastest || grid_seconds(trial) < grid_seconds(*fastest)) fastest = std::move(trial);
      }
      result = std::move(*fastest);
    });
  }
  comm.idle_barrier();
  // How that grows with the ranks on the node: the engine's reference step in lock step on 1 rank,
  // on as many as there are cores (per thread), and on all of them.
  const int cores = std::max(1, result.cpu_cores / std::max(1, result.threads));
  std::vector<int> counts = {1, std::min(comm.size(), cores), comm.size()};
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  // Passes alternate the counts, each count keeping its fastest: a shared host's speed changes
  // over seconds, and a ratio of two moments' speeds would say more about those moments.
  std::vector<double> fastest(counts.size(), std::numeric_limits<double>::infinity());
  CalibrateOptions pass = options;
  pass.occupancy_seconds = options.occupancy_seconds / std::max(1, options.occupancy_passes);
  for (int p = 0; p < std::max(1, options.occupancy_passes); ++p) {
    for (std::size_t i = 0; i < counts.size(); ++i) {
      if (std::unique_ptr<Communicator> members = comm.first_ranks(counts[i])) {
        fastest[i] = std::min(fastest[i], lock_step(*members, pass));
      }
      comm.idle_barrier();
    }
  }
  result.occupancy.clear();
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const bool known = std::isfinite(fastest[i]) && std::isfinite(fastest[0]) && fastest[0] > 0;
    result.occupancy.push_back({counts[i], known ? fastest[i] / fastest[0] : 1});
  }
  result.reference_step_seconds = std::isfinite(fastest[0]) ? fastest[0] : 0;
  // The NVMe requests at the same counts, every member swapping at once.
  result.nvme_requests.clear();
  if (options.nvme_path && result.nvme) {
    for (std::size_t i = 0; i < counts.size(); ++i) {
      if (std::unique_ptr<Communicator> members = comm.first_ranks(counts[i])) {
        const NvmeRequestCosts costs =
            measure_nvme_requests(options, *members, result.occupancy[i].factor, result);
        if (comm.rank() == 0) result.nvme_requests.push_back(costs);
      }
      comm.idle_barrier();
    }
    if (comm.rank() != 0) result.nvme_requests.assign(counts.size(), NvmeRequestCosts{});
  }
  // Every rank gets rank 0's figures (the collectives' differ a little on other ranks).
  const std::size_t groups = std::size_t(std::max(0, comm.size() - 1));
  if (comm.rank() != 0) result.group_collectives.assign(groups, GroupCollectives{});
  std::vector<double> values = flatten(result);
  share(comm, values);
  unflatten(values, result);
}

}  // namespace zerolens::exec
