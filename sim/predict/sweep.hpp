#pragma once
// The config sweep: parallel layout (tensor x pipeline x data parallel, virtual stages, sequence
// parallelism) x ZeRO++ x stage x offload (optimizer, parameters) x micro-batch x activation
// checkpointing at a fixed global batch on a fixed number of GPUs (gradient accumulation follows),
// every point planned and its step simulated, ranked by predicted throughput, with the Pareto
// front of step time against memory headroom; points that do not fit are kept but not ranked.
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sim/plan/plan.hpp"
#include "sim/timeline/timeline.hpp"

namespace zerolens {

// ZeRO++ as one sweep dimension: off, one of its three parts alone, or all three (hpZ over a
// node's GPUs, qwZ and qgZ), as the ZeRO++ paper runs it.
enum class ZeroPlusPlus : std::uint8_t { Off, Hpz, Qwz, Qgz, All };
const char* to_string(ZeroPlusPlus variant);
// "off", "hpz", "qwz", "qgz", "all"; throws InputError naming `where`.
ZeroPlusPlus parse_zeropp(const std::string& text, const std::string& where);

// How the job's GPUs are split: data x tensor x pipeline parallel.
struct ParallelLayout {
  int tensor = 1;
  int pipeline = 1;
  int virtual_stages = 1;
  bool sequence_parallel = false;
  int data = 1;               // the GPUs / (tensor x pipeline)
  int expert = 1;             // a MoE model's expert parallelism, inside the data-parallel group
  // "tp 8 sp x pp 16 v 2 x dp 8"; "dp 64" without model parallelism; "dp 64 ep 8" with experts
  std::string label() const;
  bool operator==(const ParallelLayout&) const = default;
};

struct SweepSpace {
  std::vector<int> stages{0, 1, 2, 3};
  std::vector<OffloadDevice> optimizer_devices{OffloadDevice::None, OffloadDevice::Cpu,
                                               OffloadDevice::Nvme};
  std::vector<OffloadDevice> param_devices{OffloadDevice::None, OffloadDevice::Cpu,
                                           OffloadDevice::Nvme};
  std::vector<std::int64_t> micro_batches;  // empty: every power of two dividing the batch per rank
  std::vector<bool> checkpointing{false, true};
  // The layouts searched over the base request's GPUs; an empty list keeps the base's value.
  std::vector<int> tensor_parallel, pipeline_parallel, virtual_stages;
  std::vector<int> expert_parallel;  // a MoE model's EP sizes (each must divide the layout's DP)
  std::vector<bool> sequence_parallel;
  std::vector<ZeroPlusPlus> zeropp;  // empty: the base's ZeRO++ settings, unchanged
  // Larger micro-batches of a point are not evaluated once its allocated bytes (with the CUDA
  // context and workspaces) exceed the GPU, or its CPU or NVMe peak their capacity: those grow with
  // the micro-batch (activations; under 1F1B the in-flight micro-batches x the micro-batch,
  // min(pp, accumulation) x micro, does not shrink). The caching allocator's reserved bytes do not
  // always grow (block rounding), so a point that overflows only by them prunes nothing.
  bool prune = true;
  int threads = 1;  // workers evaluating points
};

// Fills the parallelism lists left empty with every layout worth searching on the base's GPUs:
// TP in powers of two up to a node's GPUs, PP over the divisors of the block count, 1 or 2 virtual
// stages, SP off and on, ZeRO++ off and all unless the base sets it, and for a mixture-of-experts
// model every divisor of its experts per layer as the EP size (docs/sweep.md).
void add_parallel_search(const PlanRequest& base, SweepSpace& space);

struct SweepPoint {
  ParallelLayout layout;
  std::optional<ZeroPlusPlus> zeropp;  // none: the base's ZeRO++ settings
  int stage = 0;
  OffloadDevice optimizer = OffloadDevice::None;
  OffloadDevice param = OffloadDevice::None;
  std::int64_t micro_batch = 1;
  std::int64_t grad_accumulation = 1;
  bool checkpointing = false;
  std::string label() const;  // "[tp 2 x dp 4] ZeRO-3 opt:cpu param:none mb 4 x ga 8 ckpt"
};

struct SweepResult {
  SweepPoint point;
  bool fits = false;
  std::array<Bytes, kDeviceCount>
      peak{};  // GPU per rank; CPU and NVMe per node (as the plan reports)
  std::array<Bytes, kDeviceCount> capacity{};  // same scope as peak
  // The smallest free fraction of a device the point uses (1 - peak / capacity; negative when it
  // does not fit).
  double headroom = 0;
  bool pareto = false;  // no fitting point is as fast with as much headroom, and better in one
  bool overflows_larger_micro_batches = false;  // see SweepSpace::prune
  // Timeline figures; zero for points that do not fit (their step is not simulated).
  double step_time = 0, tokens_per_second = 0, model_flops_per_gpu = 0, mfu = 0,
         exposed_communication = 0;
};

// A layout's fate in the search, and why.
enum class FamilyFate : std::uint8_t { OnFront, Dominated, NothingFits, Refused };
struct SweepFamily {
  ParallelLayout layout;
  FamilyFate fate = FamilyFate::Refused;
  std::int64_t enumerated = 0, evaluated = 0, fitting = 0, pruned = 0, refused = 0, on_front = 0;
  std::string refusal;  // the planner's reason for the first point it refused, if any
  std::string verdict;  // on the front / dominated by ... / nothing fits: ... / refused: ...
};

struct SweepReport {
  std::int64_t train_batch_size = 0;  // kept for every point
  std::int64_t batch_per_rank =
      0;  // of the base layout (0 when its data-parallel size does not divide the batch)
  std::int64_t enumerated = 0;  // points of the space
  std::int64_t evaluated = 0;   // points planned (= results.size())
  std::int64_t fitting = 0;
  std::int64_t pruned = 0;   // not evaluated: a smaller micro-batch already did not fit
  std::int64_t refused = 0;  // the planner refused them (their family's verdict says why)
  std::vector<SweepResult>
      results;  // fitting by throughput (fastest first), then the rest by GPU peak
  std::vector<SweepFamily> families;  // in enumeration order
  std::vector<std::string> notes;     // dimensions narrowed and why
};

// The points of `space` that DeepSpeed accepts on this cluster, in enumeration order (layouts, then
// ZeRO++, stage, offloads, checkpointing, micro-batch ascending). Skipped combinations are
// explained in `notes` (parameter offload needs stage 3, optimizer offload needs stage 1+, NVMe
// swapping of optimizer states is a stage-3 feature, NVMe needs a cluster with NVMe; micro-batches
// must divide the batch per rank) and layouts that cannot split the GPUs or the batch are in
// `families` with the reason. Throws InputError when nothing is left.
struct SweepEnumeration {
  std::vector<SweepPoint> points;
  std::vector<SweepFamily> families;
};
SweepEnumeration enumerate_sweep(const PlanRequest& base, const SweepSpace& space,
                                 std::vector<std::string>& notes);

// The global batch every point keeps: train_batch_size when given (the base layout need not divide
// it, another may), else what the base's micro-batch and accumulation make on its data-parallel
// ranks.
std::int64_t sweep_train_batch(const PlanRequest& base);

// Plans and simulates one point: the full plan for memory; the timeline of the step with gradient
// accumulation capped (sweep_simulated_micro_steps) and the remaining micro-steps priced at the
// steady-state cost of one more period (tests check this against simulating every micro-step).
// Throws InputError when the planner refuses the point.
inline constexpr std::int64_t kSweepSimulatedMicroSteps = 3;
SweepResult evaluate_sweep_point(const PlanRequest& base, const SweepPoint& point,
                                 const TimelineOptions& options);

// How many micro-steps the sweep plans and simulates for `grad_accumulation` of them, and the
// period after which the step repeats: kSweepSimulatedMicroSteps without pipelining; under 1F1B
// pp + 2 (pp micro-batches in flight reach the memory peak, then two steady-state periods);
// GPipe every micro-step (each keeps its activations until the backwards); interleaved 1F1B
// 3 x pp in rounds of pp (its micro-batches go in groups of pp).
struct MicroStepSampling {
  std::int64_t simulated = 1;
  std::int64_t period = 1;
};
MicroStepSampling sweep_sampling(const PipelineParallelism& pipeline,
                                 std::int64_t grad_accumulation);

using SweepProgress = std::function<void(std::int64_t done, std::int64_t total)>;
// `progress` is called with the points done (evaluated, pruned or refused), one caller at a time.
SweepReport run_sweep(const PlanRequest& base, const SweepSpace& space,
                      const TimelineOptions& options, const SweepProgress& progress = {});

// Marks the Pareto front of the fitting results (step time against headroom) and writes every
// family's verdict. run_sweep calls it; exposed for tests.
void mark_pareto_front(std::vector<SweepResult>& results);
void judge_families(std::vector<SweepFamily>& families, const std::vector<SweepResult>& results);

}  // namespace zerolens
