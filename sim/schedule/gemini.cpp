#include "sim/schedule/gemini.hpp"

#include <algorithm>
#include <cstddef>

namespace zerolens {
namespace {

// AutoTensorPlacementPolicy's constants (v0.1.5: "TODO(ver217): make these args configurable").
constexpr double kWarmupNonModelRatio = 0.8;
constexpr double kSteadyCapacityRatio = 0.9;
// Steps simulated after the warm-up before the placement at a step's start must repeat.
constexpr int kMaxSteadySteps = 16;

// StatefulTensorMgr._compute_list: every use's tensors in the order they enter COMPUTE, and the
// position of each use's last one (_compute_idx when it adjusts the layout).
struct ComputeOrder {
  std::vector<std::int32_t> list;
  std::vector<std::size_t> index_at_use;
};

ComputeOrder compute_order(const GeminiInput& input) {
  ComputeOrder order;
  for (const GeminiUse& use : input.uses) {
    order.list.insert(order.list.end(), use.tensors.begin(), use.tensors.end());
    order.index_at_use.push_back(order.list.size() - 1);
  }
  return order;
}

// _sort_hold_cuda_tensors: the held shards, those next used farthest ahead (or not again this
// step) first; equals keep registration order.
std::vector<std::int32_t> by_next_use(std::vector<std::int32_t> held, const ComputeOrder& order,
                                      std::size_t compute_index) {
  std::vector<std::size_t> next(held.size(), order.list.size());
  for (std::size_t h = 0; h < held.size(); ++h) {
    for (std::size_t j = compute_index + 1; j < order.list.size(); ++j) {
      if (order.list[j] == held[h]) {
        next[h] = j;
        break;
      }
    }
  }
  std::vector<std::size_t> rank(held.size());
  for (std::size_t h = 0; h < rank.size(); ++h) rank[h] = h;
  std::stable_sort(rank.begin(), rank.end(),
                   [&](std::size_t a, std::size_t b) { return next[a] > next[b]; });
  std::vector<std::int32_t> sorted;
  for (const std::size_t h : rank) sorted.push_back(held[h]);
  return sorted;
}

struct StepRun {
  GeminiStep step;
  std::vector<bool> end_on_gpu;
};

// One use's adjust_layout; false when the held shards cannot make room.
bool adjust(const GeminiInput& in, std::size_t use, bool warmup, const ComputeOrder& order,
            std::vector<bool>& on_gpu, GeminiStep& step) {
  const GeminiUse& u = in.uses[use];
  std::vector<bool> computing(on_gpu.size(), false);
  Bytes used = 0, demand = 0;
  for (const auto t : u.tensors) computing[std::size_t(t)] = true;
  for (std::size_t t = 0; t < on_gpu.size(); ++t) {
    if (on_gpu[t]) used += in.shard_bytes[t];
    if (computing[t] && !on_gpu[t]) demand += in.shard_bytes[t];
  }
  double capacity = double(in.capacity);
  double non_model = capacity * kWarmupNonModelRatio;
  if (!warmup) {
    non_model = double(in.non_model[use]);
    capacity *= kSteadyCapacityRatio;
  }
  const double available = capacity - non_model - double(used);
  if (available < double(demand)) {
    const double to_free = double(demand) - available;
    std::vector<std::int32_t> held;
    for (std::size_t t = 0; t < on_gpu.size(); ++t) {
      if (on_gpu[t] && !computing[t]) held.push_back(std::int32_t(t));
    }
    if (!warmup) held = by_next_use(held, order, order.index_at_use[use]);
    double freed = 0;
    for (const auto t : held) {
      if (freed >= to_free) break;
      freed += double(in.shard_bytes[std::size_t(t)]);
      on_gpu[std::size_t(t)] = false;
      step.evict[use].push_back(t);
      step.evicted_bytes += in.shard_bytes[std::size_t(t)];
    }
    if (freed < to_free) {
      step.failure = "Adjust layout failed! No enough CUDA memory! Need " +
                     std::to_string(Bytes(to_free)) + ", freed " + std::to_string(Bytes(freed)) +
                     " (at use " + std::to_string(use) + " of layer " + std::to_string(u.layer) +
                     ")";
      return false;
    }
  }
  for (const auto t : u.tensors) {
    if (on_gpu[std::size_t(t)]) continue;
    on_gpu[std::size_t(t)] = true;
    step.fetch[use].push_back(t);
    step.fetched_bytes += in.shard_bytes[std::size_t(t)];
  }
  return true;
}

StepRun run_step(const GeminiInput& in, std::vector<bool> on_gpu, bool warmup,
                 const ComputeOrder& order) {
  StepRun run;
  run.step.start_on_gpu = on_gpu;
  run.step.evict.assign(in.uses.size(), {});
  run.step.fetch.assign(in.uses.size(), {});
  for (std::size_t use = 0; use < in.uses.size(); ++use) {
    if (!adjust(in, use, warmup, order, on_gpu, run.step)) break;
  }
  if (in.shards_to_host_after_step) std::fill(on_gpu.begin(), on_gpu.end(), false);
  run.end_on_gpu = std::move(on_gpu);
  return run;
}

}  // namespace

GeminiPlacement simulate_gemini(const GeminiInput& input) {
  const ComputeOrder order = compute_order(input);
  GeminiPlacement placement;
  StepRun run = run_step(input, std::vector<bool>(input.shard_bytes.size(), input.on_gpu_at_start),
                         true, order);
  placement.warmup = run.step;
  if (!run.step.failure.empty()) {
    placement.steady = run.step;
    return placement;
  }
  for (int step = 0; step < kMaxSteadySteps; ++step) {
    StepRun next = run_step(input, run.end_on_gpu, false, order);
    const bool repeats = next.end_on_gpu == next.step.start_on_gpu;
    run = std::move(next);
    if (repeats || !run.step.failure.empty()) break;
  }
  placement.steady = run.step;
  return placement;
}

}  // namespace zerolens
