// What the simulator's CPU-rank model needs beyond the host rates (docs/calibrate.md, "The CPU
// backend's own costs"): collectives per group size, the executor's GPT-2 layers over a grid of
// shapes fitted per layer kind and direction, and the engine's own work per op kind on one rank.
// Ranks that do not take part in a measurement wait in an idle barrier (asleep, taking no core);
// compute is measured with at most one rank per core, so that each figure is what one rank's thread
// gets from a core of its own while the other cores work too; each is the slowest such rank's best
// (ranks in step wait for the slowest).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "exec/calibrate/calibrate_support.hpp"
#include "exec/engine/zero_engine.hpp"
#include "exec/memory/memory_ledger.hpp"
#include "exec/model/gpt2_model.hpp"
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

// ---- least squares ------------------------------------------------------------------------------

// Solves the square system a x = b (Gaussian elimination with partial pivoting); false when
// singular.
bool solve(std::vector<std::vector<double>> a, std::vector<double> b, std::vector<double>& x) {
  const std::size_t n = b.size();
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t pivot = i;
    for (std::size_t r = i + 1; r < n; ++r) {
      if (std::abs(a[r][i]) > std::abs(a[pivot][i])) pivot = r;
    }
    if (!(std::abs(a[pivot][i]) > 0)) return false;
    std::swap(a[i], a[pivot]);
    std::swap(b[i], b[pivot]);
    for (std::size_t r = 0; r < n; ++r) {
      if (r == i) continue;
      const double f = a[r][i] / a[i][i];
      for (std::size_t c = i; c < n; ++c) a[r][c] -= f * a[i][c];
      b[r] -= f * b[i];
    }
  }
  x.resize(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = b[i] / a[i][i];
  return true;
}

}  // namespace

std::vector<double> fit_nonnegative(const std::vector<std::vector<double>>& features,
                                    const std::vector<double>& seconds) {
  const std::size_t k = features.empty() ? 0 : features.front().size();
  std::vector<double> best(k, 0);
  double best_error = std::numeric_limits<double>::infinity();
  // Every non-empty subset of the features, unconstrained on it; the best fit with no negative
  // coefficient wins (k is at most 3: seven subsets).
  for (unsigned subset = 1; subset < (1u << k); ++subset) {
    std::vector<std::size_t> used;
    for (std::size_t j = 0; j < k; ++j) {
      if (subset & (1u << j)) used.push_back(j);
    }
    std::vector<std::vector<double>> a(used.size(), std::vector<double>(used.size(), 0));
    std::vector<double> b(used.size(), 0);
    for (std::size_t i = 0; i < seconds.size(); ++i) {
      const double weight = 1 / (seconds[i] * seconds[i]);  // relative errors
      for (std::size_t p = 0; p < used.size(); ++p) {
        b[p] += weight * features[i][used[p]] * seconds[i];
        for (std::size_t q = 0; q < used.size(); ++q)
          a[p][q] += weight * features[i][used[p]] * features[i][used[q]];
      }
    }
    std::vector<double> x;
    if (!solve(a, b, x)) continue;
    if (std::any_of(x.begin(), x.end(), [](double v) { return v < 0; })) continue;
    std::vector<double> coefficients(k, 0);
    for (std::size_t p = 0; p < used.size(); ++p) coefficients[used[p]] = x[p];
    double error = 0;
    for (std::size_t i = 0; i < seconds.size(); ++i) {
      double predicted = 0;
      for (std::size_t j = 0; j < k; ++j) predicted += coefficients[j] * features[i][j];
      error += std::pow((predicted - seconds[i]) / seconds[i], 2);
    }
    if (error < best_error) {
      best_error = error;
      best = coefficients;
    }
  }
  return best;
}

GroupCollectives fit_group_collectives(int ranks, const std::vector<CollectiveRate>& rates) {
  // t = latency + traffic / bandwidth over every kind and size, in relative errors.
  std::vector<std::vector<double>> features;
  std::vector<double> seconds;
  for (const CollectiveRate& rate : rates) {
    const LinkTraffic traffic = collective_traffic(rate.kind, rate.bytes, GroupShape{ranks, 1});
    features.push_back({1.0, double(traffic.intra_node + traffic.inter_node)});
    seconds.push_back(rate.seconds);
  }
  const std::vector<double> fit = fit_nonnegative(features, seconds);
  double bandwidth = fit.size() == 2 && fit[1] > 0 ? 1 / fit[1] : 0;
  if (!(bandwidth > 0)) {  // all latency: take the largest message's bus bandwidth
    for (const CollectiveRate& rate : rates) bandwidth = std::max(bandwidth, rate.busbw);
  }
  return {ranks, fit.empty() ? 0 : fit[0], bandwidth};
}

namespace {

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
    forward_.assign(model_.layers.size(), std::numeric_limits<double>::infinity());
    backward_ = forward_;
  }

  // One micro-batch: every forward, then every backward, each timed.
  void run(std::int64_t sample) {
    net_->load_batch(sample, shape_.micro_batch);
    const std::size_t layers = model_.layers.size();
    for (std::size_t l = 0; l < layers; ++l) {
      const auto params = param_views(l);
      const auto start = Clock::now();
      net_->forward(l, params);
      forward_[l] = std::min(forward_[l], seconds_since(start));
    }
    for (std::size_t l = layers; l-- > 0;) {
      const auto params = param_views(l);
      const auto grads = grad_views(l);
      const auto start = Clock::now();
      net_->backward(l, params, grads, 1.0f);
      backward_[l] = std::min(backward_[l], seconds_since(start));
    }
  }

  void add_timings(std::vector<LayerTiming>& out) const {
    for (std::size_t l = 0; l < model_.layers.size(); ++l) {
      const Layer& layer = model_.layers[l];
      for (const bool backward : {false, true}) {
        out.push_back({shape_, layer.kind, backward,
                       layer_work(layer, shape_.micro_batch, shape_.seq_len, backward),
                       backward ? backward_[l] : forward_[l]});
      }
    }
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
  std::vector<double> forward_, backward_;
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
  // Round after round over the whole grid for the given time: the best of each is taken, so a
  // burst of other load (a shared host) hits some rounds, not a whole shape.
  const auto start = Clock::now();
  std::int64_t round = 0;
  do {
    for (const auto& bench : benches) bench->run(round * 64);
    ++round;
  } while (seconds_since(start) < options.layer_seconds || round < 2);
  result.layer_timings.clear();
  for (const auto& bench : benches) bench->add_timings(result.layer_timings);
}

// ---- the engine's own work ----------------------------------------------------------------------

// A reference plan of the engine on one rank: GPT-2 of `engine_shape`, two blocks.
Plan reference_plan(const CalibrateOptions& options, int stage, Precision precision, bool offload) {
  const CalibrateLayerShape& s = options.engine_shape;
  PlanRequest request;
  request.model = grid_model(s, 2);
  TrainingConfig& c = request.config;
  c.zero.stage = stage;
  c.precision.precision = precision;
  if (offload) c.zero.offload_optimizer.device = OffloadDevice::Cpu;
  c.batch.micro_batch_per_gpu = s.micro_batch;
  c.seq_len = s.seq_len;
  c.zero.reduce_bucket_size = 500000;  // as `zerolens run` plans
  request.dp_size = 1;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), 1, 1);  // memory only
  request.options.cuda_context_bytes = 0;
  request.options.library_workspace_bytes = 0;
  request.options.fragmentation_fraction = 0;
  return make_plan(std::move(request));
}

// Best time of each op of the plan's step over `seconds` of steps (at least 3).
std::vector<double> op_times(const Plan& plan, Communicator& alone, double seconds) {
  MemoryLedger ledger;
  const ScheduleContext& context = plan.schedule.context;
  Gpt2Model model(plan.request.model,
                  {.micro_batch = context.micro_batch,
                   .seq_len = context.seq_len,
                   .activation_element_bytes = plan.request.config.precision.param_bytes()},
                  ledger);
  ZeroEngine engine(plan, alone, model, ledger);
  std::vector<double> best(plan.schedule.ops.size(), std::numeric_limits<double>::infinity());
  const auto start = Clock::now();
  for (std::int64_t step = 0; step < 3 || seconds_since(start) < seconds; ++step) {
    engine.step(step, [&](std::size_t op, double begin, double end) {
      if (step > 0)
        best[op] = std::min(best[op], end - begin);  // the first step pays first touches
    });
  }
  return best;
}

// Seconds per unit: the summed best times of the plan's ops of `kind` (on `stream`, when given)
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

void measure_engine(const CalibrateOptions& options, Communicator& alone, Calibration& result) {
  const auto bytes = [](const Op& op) { return double(op.bytes); };
  const auto touched = [](const Op& op) { return double(op.memory_bytes_touched); };
  const double each = options.engine_seconds / 4;
  EngineCosts& e = result.engine;
  {
    const Plan plan = reference_plan(options, 0, Precision::Bf16, false);
    const std::vector<double> times = op_times(plan, alone, each);
    e.all_reduce_per_byte = per_unit(plan, times, OpKind::AllReduce, bytes);
  }
  {
    const Plan plan = reference_plan(options, 2, Precision::Bf16, false);
    const std::vector<double> times = op_times(plan, alone, each);
    const double owned = double(plan.schedule.layout.owned);
    e.reduce_scatter_per_byte = per_unit(plan, times, OpKind::ReduceScatter, bytes);
    e.all_gather_per_byte = per_unit(plan, times, OpKind::AllGather, bytes);
    e.norm_per_element = per_unit(plan, times, OpKind::GradNorm, [&](const Op&) { return owned; });
    e.mixed_optimizer_per_byte = per_unit(plan, times, OpKind::OptimizerStep, touched);
  }
  {
    const Plan plan = reference_plan(options, 2, Precision::Fp32, false);
    e.optimizer_per_byte =
        per_unit(plan, op_times(plan, alone, each), OpKind::OptimizerStep, touched);
  }
  {
    const Plan plan = reference_plan(options, 2, Precision::Bf16, true);
    const std::vector<double> times = op_times(plan, alone, each);
    e.host_optimizer_per_byte = per_unit(plan, times, OpKind::OptimizerStep, touched, Stream::Cpu);
    const double copies = per_unit(plan, times, OpKind::CopyD2H, bytes) +
                          per_unit(plan, times, OpKind::CopyH2D, bytes);
    const bool both = per_unit(plan, times, OpKind::CopyD2H, bytes) > 0 &&
                      per_unit(plan, times, OpKind::CopyH2D, bytes) > 0;
    e.copy_per_byte = both ? copies / 2 : copies;
  }
}

// Ranks in step wait for the slowest: each figure is the slowest member's best.
void slowest_of(Communicator& members, Calibration& result) {
  for (LayerTiming& timing : result.layer_timings)
    timing.seconds = members.all_reduce_max(timing.seconds);
  fit_layers(result);
  EngineCosts& e = result.engine;
  for (double* field : {&e.all_reduce_per_byte, &e.reduce_scatter_per_byte, &e.all_gather_per_byte,
                        &e.norm_per_element, &e.optimizer_per_byte, &e.mixed_optimizer_per_byte,
                        &e.host_optimizer_per_byte, &e.copy_per_byte}) {
    *field = members.all_reduce_max(*field);
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

std::vector<double> flatten(const Calibration& c) {
  std::vector<double> v;
  for (const auto* costs : {&c.layer_forward, &c.layer_backward}) {
    for (const LayerCost& cost : *costs)
      v.insert(v.end(), {cost.per_matmul_flop, cost.per_attention_flop, cost.per_element});
  }
  const EngineCosts& e = c.engine;
  v.insert(v.end(), {e.all_reduce_per_byte, e.reduce_scatter_per_byte, e.all_gather_per_byte,
                     e.norm_per_element, e.optimizer_per_byte, e.mixed_optimizer_per_byte,
                     e.host_optimizer_per_byte, e.copy_per_byte});
  for (const GroupCollectives& g : c.group_collectives)
    v.insert(v.end(), {double(g.ranks), g.latency, g.bandwidth});
  return v;
}

void unflatten(const std::vector<double>& v, Calibration& c) {
  std::size_t i = 0;
  for (auto* costs : {&c.layer_forward, &c.layer_backward}) {
    for (LayerCost& cost : *costs) cost = {v[i], v[i + 1], v[i + 2]}, i += 3;
  }
  EngineCosts& e = c.engine;
  for (double* field : {&e.all_reduce_per_byte, &e.reduce_scatter_per_byte, &e.all_gather_per_byte,
                        &e.norm_per_element, &e.optimizer_per_byte, &e.mixed_optimizer_per_byte,
                        &e.host_optimizer_per_byte, &e.copy_per_byte}) {
    *field = v[i++];
  }
  for (GroupCollectives& g : c.group_collectives)
    g = {int(std::lround(v[i])), v[i + 1], v[i + 2]}, i += 3;
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
      result.group_collectives.push_back(fit_group_collectives(group, rates));
    }
    comm.idle_barrier();
  }
  // Compute with at most one rank per core, each alone (a one-rank engine of its own).
  const int active =
      std::max(1, std::min(comm.size(), result.cpu_cores / std::max(1, result.threads)));
  std::unique_ptr<Communicator> members = comm.first_ranks(active);
  if (members) {
    std::unique_ptr<Communicator> alone = members->alone();
    on_every_rank(*members, [&] {
      measure_layers(options, result);
      measure_engine(options, *alone, result);
    });
    slowest_of(*members, result);
  }
  comm.idle_barrier();
  // Every rank gets rank 0's figures (the collectives' differ a little on other ranks).
  const std::size_t groups = std::size_t(std::max(0, comm.size() - 1));
  if (comm.rank() != 0) result.group_collectives.assign(groups, GroupCollectives{});
  std::vector<double> values = flatten(result);
  share(comm, values);
  unflatten(values, result);
}

}  // namespace zerolens::exec
