#pragma once
// `zerolens calibrate`: measures this machine as the executor uses it (every MPI rank is one
// "GPU" of the CPU device backend) and turns the figures into a cluster description the simulator
// reads. Every rank measures at the same time (barriers around each timed region), so per-rank
// figures are what a rank gets while the others work too; node figures are their sum.
//
//   GEMM: kernels::matmul_forward on n x n x n, 2 n^3 FLOP per call, fp32.
//   Memory: STREAM copy and triad over float32 (kernels/stream.hpp), bytes as STREAM counts them
//     (copy 2 x 4, triad 3 x 4 bytes per element; no write-allocate traffic).
//   Host Adam: kernels::adam_step (AdamW), 28 bytes touched per parameter (reads parameter,
//     gradient, both moments; writes parameter and both moments).
//   Collectives: all-reduce, all-gather, reduce-scatter through the MPI communicator; algbw = S/t,
//     busbw = bytes each rank sends per the ring algorithm / t (nccl-tests' definitions).
//   NVMe: NvmeStore writes then reads one object per rank under --nvme-path.
// With a DeviceCalibrator (exec/cuda/calibrate_gpu.hpp: `--device cuda`) each rank also measures
// its GPU, which replaces the host GEMM, and the collectives run through the GPU communicator.
#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "exec/comm/communicator.hpp"
#include "exec/io/nvme_io.hpp"
#include "sim/hardware/hardware.hpp"
#include "sim/timeline/cpu_ranks.hpp"

namespace zerolens::exec {

inline constexpr double kAdamBytesPerParameter = 28;  // 4 x 4 read + 3 x 4 written

// A GPT-2 shape calibrate times the executor's layers at (one block; ffn = 4 x hidden).
struct CalibrateLayerShape {
  std::int64_t hidden = 64;
  int heads = 4;
  std::int64_t vocab = 256, seq_len = 64, micro_batch = 4;
};

// The CPU backend's grid: head sizes 16 and 32, 64 to 640 vocabulary entries, 64 to 512 tokens.
inline std::vector<CalibrateLayerShape> default_layer_shapes() {
  return {{32, 2, 128, 64, 4},  {96, 6, 384, 32, 8},   {128, 8, 512, 64, 4},
          {64, 4, 512, 128, 2}, {160, 10, 640, 32, 4}, {128, 4, 256, 64, 2}};
}

struct CalibrateOptions {
  std::vector<std::size_t> gemm_sizes = {256, 512, 1024};
  std::size_t stream_elements = std::size_t{1} << 25;  // per array (128 MiB of float)
  std::size_t adam_parameters = std::size_t{1} << 24;  // 64 MiB per array, 4 arrays
  std::vector<Bytes> message_sizes = {Bytes{4} << 10, Bytes{64} << 10, Bytes{1} << 20,
                                      Bytes{16} << 20};
  std::optional<std::string> nvme_path;  // no NVMe measurement without it
  Bytes nvme_bytes = Bytes{256} << 20;   // per rank
  Bytes nvme_request_bytes = Bytes{256} << 10;  // per rank: a small request's time (its latency)
  NvmeOptions nvme;
  Bytes gpu_copy_bytes = Bytes{1} << 30;        // device-to-device copy (--device cuda)
  Bytes gpu_transfer_bytes = Bytes{256} << 20;  // each pinned host <-> device copy
  // The CPU backend's own costs (docs/calibrate.md): its GPT-2 layers over a grid of shapes, timed
  // round after round for layer_seconds; the engine on one rank over reference plans of
  // engine_shape (two blocks) for engine_seconds.
  std::vector<CalibrateLayerShape> layer_shapes = default_layer_shapes();
  double layer_seconds = 15;
  CalibrateLayerShape engine_shape{128, 8, 512, 64, 4};
  double engine_seconds = 8;
  int compute_passes = 1;         // the layers and the engine measured again, the fastest pass kept
  double occupancy_seconds = 12;  // each rank count's lock-step steps, over all passes
  int occupancy_passes = 4;
  int repeats = 5;  // timed runs of each measurement (best for compute and memory, median for I/O)
  int threads = 0;  // OpenMP threads of the STREAM and Adam kernels (0: the OpenMP default)
};
// Smaller arrays and fewer sizes: seconds instead of a minute.
CalibrateOptions quick_calibrate_options();
// Throws InputError naming the option for empty size lists, zero sizes, repeats < 1.
void validate(const CalibrateOptions& options);

struct GemmRate {
  std::size_t n = 0;
  double seconds = 0;           // best call
  double flops_per_second = 0;  // per rank
};

struct CollectiveRate {
  OpKind kind = OpKind::AllReduce;
  Bytes bytes = 0;     // message size S as nccl-tests counts it
  double seconds = 0;  // mean per call, slowest rank
  double algbw = 0;    // bytes/s
  double busbw = 0;    // bytes/s
};

struct NvmeRate {
  std::string path;
  NvmeMode mode = NvmeMode::Direct;
  std::string mode_reason;
  Bytes bytes_per_rank = 0;
  std::size_t block_size = 0;
  int queue_depth = 0;
  double write_bytes_per_second = 0;  // whole node: every rank writing a new file at once
  // Writing over an existing object, as the engine does every step: the write also pays for
  // replacing the previous version (NvmeStore renames a new file over it, freeing its blocks).
  double overwrite_bytes_per_second = 0;
  double read_bytes_per_second = 0;
  Bytes available_bytes = 0;  // free space of the filesystem
  // A request of request_bytes per rank, every rank at once (median), and what a request costs
  // beyond its bytes at the rates above: from these small requests, or, with the CPU backend's
  // costs, from the engine's own sub-group swaps in its steps (exec/run/calibrate_executor.hpp).
  Bytes request_bytes = 0;
  double write_request_seconds = 0, read_request_seconds = 0;
  double write_latency = 0, read_latency = 0;  // >= 0
};

// One rank's GPU (docs/calibrate.md, "--device cuda").
struct GpuCalibration {
  std::string name;           // cudaDeviceProp::name
  Bytes memory_bytes = 0;     // the device's total memory (cudaMemGetInfo)
  Bytes free_bytes = 0;       // free when calibration started
  std::vector<GemmRate> gemm_fp32, gemm_bf16;  // cuBLASLt, 2 n^3 FLOP per call
  Bytes copy_bytes = 0;       // size of the device-to-device copy
  double hbm_bytes_per_second = 0;  // device-to-device copy, read + write: 2 x size / t
  Bytes transfer_bytes = 0;         // size of each pinned host <-> device copy
  double h2d_bytes_per_second = 0;  // size / t, one direction
  double d2h_bytes_per_second = 0;
  std::string collective_backend, backend_reason;  // "nccl" or "mpi-staged", and why
};

// One layer of a grid shape, timed (the best of its rounds).
struct LayerTiming {
  CalibrateLayerShape shape;
  LayerKind kind = LayerKind::TransformerBlock;
  bool backward = false;
  LayerWork work;  // as the simulator counts it (sim/timeline/cpu_ranks.hpp)
  double seconds = 0;
};

struct Calibration {
  std::string host, cpu_model;
  int ranks = 1;
  int cpu_cores = 1;
  int threads = 1;  // OpenMP threads per rank
  Bytes host_memory = 0;
  std::vector<GemmRate> gemm;  // host GEMM (empty when a GPU was measured)
  double copy_bytes_per_second = 0;         // per rank
  double triad_bytes_per_second = 0;        // per rank
  double adam_parameters_per_second = 0;    // per rank
  double adam_bytes_per_second = 0;         // per rank
  std::vector<CollectiveRate> collectives;  // empty with one rank
  std::optional<NvmeRate> nvme;
  std::optional<GpuCalibration> gpu;  // `--device cuda`
  // The CPU backend's own costs (without --device cuda): collectives per group size 2 .. ranks,
  // the layers timed over the grid and their costs fitted per kind, the engine's own work.
  std::vector<GroupCollectives> group_collectives;
  std::vector<LayerTiming> layer_timings;  // each the slowest measuring rank's best
  std::array<LayerCost, kLayerKindCount> layer_forward{}, layer_backward{};  // in a step
  // What a layer costs in the engine's step over what the grid's fit gives it alone, per kind and
  // direction (forward, backward); the costs above include it (1: not measured).
  std::array<std::array<double, 2>, kLayerKindCount> in_step = [] {
    std::array<std::array<double, 2>, kLayerKindCount> ones{};
    for (auto& kind : ones) kind = {1, 1};
    return ones;
  }();
  EngineCosts engine;
  std::vector<Occupancy> occupancy;  // 1 rank (factor 1), the cores' count, all ranks
  // With --nvme-path: the engine's NVMe requests, beyond their bytes, at the occupancy's counts of
  // ranks swapping in lock step (the node's drive shared as in their steps).
  std::vector<NvmeRequestCosts> nvme_requests;
  double reference_step_seconds = 0;  // the engine's reference step on 1 rank (occupancy's base)

  double adam_over_triad() const { return adam_bytes_per_second / triad_bytes_per_second; }
};

// The device side of calibrate(): its figures replace the host GEMM, its communicator runs the
// collectives. Each call is collective over the same ranks as calibrate's communicator.
class DeviceCalibrator {
 public:
  virtual ~DeviceCalibrator() = default;
  virtual GpuCalibration measure(const CalibrateOptions& options) = 0;
  virtual std::vector<CollectiveRate> measure_collectives(const std::vector<Bytes>& sizes) = 0;
};

// GEMM sizes n for a GPU when --gemm-sizes is not given: large enough to approach peak.
std::vector<std::size_t> gpu_gemm_sizes(bool quick);

// The CPU backend's own costs into a calibration (exec/run/calibrate_executor.hpp:
// measure_cpu_backend, above the model and engine it times). Collective.
using CpuBackendCosts = std::function<void(Communicator&, const CalibrateOptions&, Calibration&)>;

// Every rank calls it (collective); every rank gets the same result. With `device`, each rank
// measures its GPU as well (and the host GEMM is not run); without it, `cpu_backend` (when given)
// measures the CPU backend's own costs after the host rates.
Calibration calibrate(Communicator& comm, const CalibrateOptions& options,
                      DeviceCalibrator* device = nullptr, const CpuBackendCosts& cpu_backend = {});

// nccl-tests' bus bandwidth of a collective of S bytes over `ranks` ranks taking `seconds`.
double bus_bandwidth(OpKind kind, Bytes bytes, int ranks, double seconds);

// Least squares of `seconds` on `features` (rows) in relative errors, every coefficient >= 0 (the
// best fit over the subsets of features whose unconstrained fit has none negative).
std::vector<double> fit_nonnegative(const std::vector<std::vector<double>>& features,
                                    const std::vector<double>& seconds);
// What a request of a kind costs: seconds = requests x per_request + bytes x per_byte, fitted by
// fit_nonnegative over the measurements (each a plan's requests, bytes and seconds) that took time
// beyond their bytes; none: zero.
struct RequestCost {
  double per_request = 0, per_byte = 0;
};
RequestCost fit_request_cost(const std::vector<double>& requests, const std::vector<double>& bytes,
                             const std::vector<double>& seconds);

// The layer grid's shape of the smallest hidden size (the engine's shape when the grid is empty).
CalibrateLayerShape smallest_shape(const CalibrateOptions& options);

// t = latency + ring traffic / bandwidth fitted over a group's measured collectives.
GroupCollectives fit_group_collectives(int ranks, const std::vector<CollectiveRate>& rates);

// The cluster description (docs/calibrate.md lists which measurement fills which field). An empty
// name gives "calibrated-<host>".
Cluster calibrated_cluster(const Calibration& calibration, const std::string& name = "");
// Every measurement, for reports and scripts (schema "zerolens.calibration").
nlohmann::json calibration_to_json(const Calibration& calibration);

}  // namespace zerolens::exec
