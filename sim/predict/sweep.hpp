#pragma once
// The config sweep: stage x offload (optimizer, parameters) x micro-batch x activation
// checkpointing at a fixed global batch (gradient accumulation follows), every point planned and
// its step simulated, ranked by predicted throughput; points that do not fit are kept but not ranked.
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sim/plan/plan.hpp"
#include "sim/timeline/timeline.hpp"

namespace zerolens {

struct SweepSpace {
  std::vector<int> stages{0, 1, 2, 3};
  std::vector<OffloadDevice> optimizer_devices{OffloadDevice::None, OffloadDevice::Cpu, OffloadDevice::Nvme};
  std::vector<OffloadDevice> param_devices{OffloadDevice::None, OffloadDevice::Cpu, OffloadDevice::Nvme};
  std::vector<std::int64_t> micro_batches;  // empty: every power of two dividing the batch per rank
  std::vector<bool> checkpointing{false, true};
};

struct SweepPoint {
  int stage = 0;
  OffloadDevice optimizer = OffloadDevice::None;
  OffloadDevice param = OffloadDevice::None;
  std::int64_t micro_batch = 1;
  std::int64_t grad_accumulation = 1;
  bool checkpointing = false;
  std::string label() const;  // "ZeRO-3 opt:cpu param:none mb 4 x ga 8 ckpt"
};

struct SweepResult {
  SweepPoint point;
  bool fits = false;
  std::array<Bytes, kDeviceCount> peak{};      // GPU per rank; CPU and NVMe per node (as the plan reports)
  std::array<Bytes, kDeviceCount> capacity{};  // same scope as peak
  // Timeline figures; zero for points that do not fit (their step is not simulated).
  double step_time = 0, tokens_per_second = 0, model_flops_per_gpu = 0, mfu = 0, exposed_communication = 0;
};

struct SweepReport {
  std::int64_t train_batch_size = 0;  // kept for every point
  std::int64_t batch_per_rank = 0;    // micro-batch x gradient accumulation
  std::int64_t evaluated = 0;         // points planned (= results.size())
  std::int64_t fitting = 0;
  std::vector<SweepResult> results;   // fitting by throughput (fastest first), then the rest by GPU peak
  std::vector<std::string> notes;     // dimensions narrowed and why
};

// The points of `space` that DeepSpeed accepts on this cluster, in enumeration order. Skipped
// combinations are explained in `notes` (parameter offload needs stage 3, optimizer offload needs
// stage 1+, NVMe swapping of optimizer states is a stage-3 feature, NVMe needs a cluster with NVMe;
// micro-batches must divide the batch per rank). Throws InputError when nothing is left.
std::vector<SweepPoint> enumerate_sweep(const PlanRequest& base, const SweepSpace& space,
                                        std::vector<std::string>& notes);

// Plans and simulates one point: the full plan for memory; the timeline of the step with gradient
// accumulation capped at kSweepSimulatedMicroSteps and the remaining micro-steps priced at the
// steady-state cost of one more (tests check this against simulating every micro-step).
inline constexpr std::int64_t kSweepSimulatedMicroSteps = 3;
SweepResult evaluate_sweep_point(const PlanRequest& base, const SweepPoint& point, const TimelineOptions& options);

using SweepProgress = std::function<void(std::int64_t done, std::int64_t total)>;
SweepReport run_sweep(const PlanRequest& base, const SweepSpace& space, const TimelineOptions& options,
                      const SweepProgress& progress = {});

}  // namespace zerolens
