// The host measurements of `zerolens calibrate`: GEMM, STREAM copy/triad, host Adam and NVMe,
// each run by every rank at once and timed on the slowest rank.
#include "exec/calibrate/calibrate.hpp"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <new>
#include <stdexcept>

#include "exec/calibrate/calibrate_support.hpp"
#include "exec/memory/host_heap.hpp"
#include "kernels/matmul.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/stream.hpp"
#include "sim/core/error.hpp"

namespace zerolens::exec {
namespace {

// An aligned host array that is not part of any training state (so not in a ledger).
template <typename T>
class HostArray {
 public:
  explicit HostArray(std::size_t count, std::size_t alignment = kNvmeAlignment) : count_(count) {
    const std::size_t bytes = std::max<std::size_t>(
        alignment, (count * sizeof(T) + alignment - 1) / alignment * alignment);
    data_ = static_cast<T*>(std::aligned_alloc(alignment, bytes));
    if (!data_) throw std::bad_alloc();
  }
  ~HostArray() { std::free(data_); }
  HostArray(const HostArray&) = delete;
  HostArray& operator=(const HostArray&) = delete;
  T* data() { return data_; }
  std::size_t size() const { return count_; }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

double best(const std::vector<double>& times) {
  return *std::min_element(times.begin(), times.end());
}

double median(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  const std::size_t middle = times.size() / 2;
  return times.size() % 2 ? times[middle] : (times[middle - 1] + times[middle]) / 2;
}

GemmRate measure_gemm(Communicator& comm, std::size_t n, int repeats) {
  HostArray<float> out(n * n), inp(n * n), weight(n * n);
  kernels::stream_fill(inp.data(), 0.5f, n * n);
  kernels::stream_fill(weight.data(), 0.25f, n * n);
  const double flops_per_call = 2.0 * double(n) * double(n) * double(n);
  const int calls = int(std::max(1.0, 2e9 / flops_per_call));  // ~2 GFLOP per timed run
  auto run = [&] {
    for (int call = 0; call < calls; ++call)
      kernels::matmul_forward(out.data(), inp.data(), weight.data(), nullptr, n, n, n);
  };
  run();  // warm-up: BLAS thread pool, page faults
  const double seconds = best(timed_runs(comm, repeats, run)) / calls;
  return {n, seconds, flops_per_call / seconds};
}

// STREAM arrays and Adam state, allocated together so the runs can alternate.
struct HostKernels {
  explicit HostKernels(const CalibrateOptions& options)
      : n(options.stream_elements),
        p(options.adam_parameters),
        threads(options.threads),
        a(n),
        b(n),
        c(n),
        params(p),
        grads(p),
        m(p),
        v(p) {
    for (float* array : {a.data(), b.data(), c.data()})
      kernels::stream_fill(array, 1.0f, n, threads);
    kernels::stream_fill(params.data(), 1.0f, p, threads);
    kernels::stream_fill(grads.data(), 0.01f, p, threads);
    kernels::stream_fill(m.data(), 0.0f, p, threads);
    kernels::stream_fill(v.data(), 0.0f, p, threads);
    config.weight_decay = 0.01;
  }
  void copy() { kernels::stream_copy(a.data(), b.data(), n, threads); }
  void triad() { kernels::stream_triad(a.data(), b.data(), c.data(), 3.0f, n, threads); }
  void adam() {
    kernels::adam_step(params.data(), grads.data(), m.data(), v.data(), p, config, ++step, threads);
  }

  std::size_t n, p;
  int threads;
  HostArray<float> a, b, c, params, grads, m, v;
  kernels::AdamConfig config;
  std::int64_t step = 0;
};

// Copy, triad and Adam alternate run by run, so a burst of load from elsewhere hits all three
// alike and the Adam/triad ratio compares like with like; each keeps its best run.
void measure_host_memory(Communicator& comm, const CalibrateOptions& options, Calibration& result) {
  HostKernels host(options);
  std::vector<double> copy, triad, adam;
  for (int run = 0; run < options.repeats; ++run) {
    copy.push_back(timed_runs(comm, 1, [&] { host.copy(); })[0]);
    triad.push_back(timed_runs(comm, 1, [&] { host.triad(); })[0]);
    adam.push_back(timed_runs(comm, 1, [&] { host.adam(); })[0]);
  }
  result.copy_bytes_per_second = double(kernels::kStreamCopyBytesPerElement * host.n) / best(copy);
  result.triad_bytes_per_second =
      double(kernels::kStreamTriadBytesPerElement * host.n) / best(triad);
  result.adam_parameters_per_second = double(host.p) / best(adam);
  result.adam_bytes_per_second = kAdamBytesPerParameter * result.adam_parameters_per_second;
}

Bytes available_bytes(const std::string& path) {
  struct statvfs info {};
  if (::statvfs(path.c_str(), &info) != 0) return 0;
  return Bytes(info.f_bavail) * Bytes(info.f_frsize);
}

std::unique_ptr<NvmeStore> open_store(Communicator& comm, const CalibrateOptions& options) {
  std::unique_ptr<NvmeStore> store;
  on_every_rank(comm, [&] {
    try {
      NvmeOptions nvme = options.nvme;
      nvme.overwrite_in_place = true;  // as the engine's swap files are written
      store = std::make_unique<NvmeStore>(*options.nvme_path, nvme);
    } catch (const NvmeError& error) {
      throw InputError("--nvme-path", error.what());
    } catch (const std::invalid_argument& error) {
      throw InputError("--block-size/--queue-depth", error.what());
    }
  });
  return store;
}

NvmeRate measure_nvme(Communicator& comm, const CalibrateOptions& options, NvmeStore& store) {
  const auto bytes = std::size_t(options.nvme_bytes);
  HostArray<std::byte> data(bytes), back(bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    data.data()[i] = std::byte((i * 131 + std::size_t(comm.rank())) & 0xff);
  const std::string name = "zerolens-calibrate-rank" + std::to_string(comm.rank());
  const std::span<const std::byte> source(data.data(), bytes);
  const std::span<std::byte> target(back.data(), bytes);
  const int repeats = std::min(options.repeats, 3);
  // Each write makes a new file, as fio's runs do (the bench removes fio's file before each): the
  // old version's unlink is not I/O bandwidth.
  const auto write_once = [&] { store.write(name, source); };
  const double write = median(timed_runs(comm, repeats, write_once, [&] { store.remove(name); }));
  const double overwrite = median(timed_runs(comm, repeats, write_once));
  const double read = median(timed_runs(comm, repeats, [&] { store.read(name, target); }));
  on_every_rank(comm, [&] {
    store.remove(name);
    if (!std::equal(source.begin(), source.end(), target.begin())) {
      throw NvmeError(store.path_of(name), "calibration read back different bytes than it wrote",
                      0);
    }
  });
  const double node_bytes = double(bytes) * comm.size();
  // Small requests, as the engine makes them: overwrite, then read back, one object per rank.
  const auto small = std::size_t(std::min<Bytes>(options.nvme_request_bytes, Bytes(bytes)));
  const std::span<const std::byte> small_source(data.data(), small);
  const std::span<std::byte> small_target(back.data(), small);
  const std::string small_name = name + "-request";
  on_every_rank(comm, [&] { store.write(small_name, small_source); });
  const int request_repeats = std::max(5, 3 * repeats);
  const double small_write =
      median(timed_runs(comm, request_repeats, [&] { store.write(small_name, small_source); }));
  const double small_read =
      median(timed_runs(comm, request_repeats, [&] { store.read(small_name, small_target); }));
  on_every_rank(comm, [&] { store.remove(small_name); });
  const double small_node = double(small) * comm.size();
  const double write_latency = std::max(0.0, small_write - small_node / (node_bytes / overwrite));
  const double read_latency = std::max(0.0, small_read - small_node / (node_bytes / read));
  return {store.directory(),
          store.mode(),
          store.mode_reason(),
          Bytes(bytes),
          store.options().block_size,
          store.options().queue_depth,
          node_bytes / write,
          node_bytes / overwrite,
          node_bytes / read,
          available_bytes(store.directory()),
          Bytes(small),
          small_write,
          small_read,
          write_latency,
          read_latency};
}

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos)
      return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

void describe_host(Communicator& comm, const CalibrateOptions& options, Calibration& result) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  result.host = host;
  result.cpu_model = cpu_model();
  result.ranks = comm.size();
  result.cpu_cores = int(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  result.threads = kernels::host_thread_count(options.threads);
  result.host_memory = Bytes(::sysconf(_SC_PHYS_PAGES)) * Bytes(::sysconf(_SC_PAGESIZE));
}

}  // namespace

void on_every_rank(Communicator& comm, const std::function<void()>& action) {
  std::exception_ptr error;
  try {
    action();
  } catch (...) {
    error = std::current_exception();
  }
  const double failed_ranks = comm.report_sum(error ? 1.0 : 0.0);
  if (error) std::rethrow_exception(error);
  if (failed_ranks > 0)
    throw std::runtime_error("calibrate: another rank failed (its error is printed by it)");
}

std::vector<double> timed_runs(Communicator& comm, int repeats, const std::function<void()>& body,
                               const std::function<void()>& untimed_setup) {
  std::vector<double> times;
  for (int run = 0; run < repeats; ++run) {
    if (untimed_setup) on_every_rank(comm, untimed_setup);
    comm.barrier();
    double elapsed = 0;
    on_every_rank(comm, [&] {
      const auto start = std::chrono::steady_clock::now();
      body();
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
    times.push_back(comm.all_reduce_max(elapsed));
  }
  return times;
}

CalibrateOptions quick_calibrate_options() {
  CalibrateOptions options;
  options.gemm_sizes = {256, 512};
  options.stream_elements = std::size_t{1} << 23;
  options.adam_parameters = std::size_t{1} << 22;
  options.message_sizes = {Bytes{4} << 10, Bytes{1} << 20};
  options.nvme_bytes = Bytes{32} << 20;
  options.nvme_request_bytes = Bytes{128} << 10;
  options.gpu_copy_bytes = Bytes{256} << 20;
  options.gpu_transfer_bytes = Bytes{64} << 20;
  options.repeats = 3;
  options.layer_shapes = {
      {32, 2, 128, 64, 4}, {96, 6, 384, 32, 8}, {128, 8, 512, 64, 4}, {64, 4, 512, 128, 2}};
  options.layer_seconds = 2;
  options.engine_seconds = 1.5;
  options.occupancy_seconds = 1.5;
  options.occupancy_passes = 1;
  return options;
}

void validate(const CalibrateOptions& options) {
  if (options.compute_passes < 1 || options.compute_passes > 100)
    throw InputError("--passes",
                     std::to_string(options.compute_passes) + " must be between 1 and 100");
  if (options.gemm_sizes.empty()) throw InputError("--gemm-sizes", "give at least one size");
  for (const auto n : options.gemm_sizes) {
    if (n < 1 || n > 16384)
      throw InputError("--gemm-sizes",
                       "size " + std::to_string(n) + " must be between 1 and 16384");
  }
  if (options.message_sizes.empty()) throw InputError("--sizes", "give at least one message size");
  for (const auto bytes : options.message_sizes) {
    if (bytes < 4 || bytes > (Bytes{1} << 32)) {
      throw InputError("--sizes", "message size " + std::to_string(bytes) +
                                      " must be between 4 bytes and 4 GiB");
    }
  }
  if (options.stream_elements < 1024)
    throw InputError("--stream-elements", "must be at least 1024");
  if (options.adam_parameters < 1024)
    throw InputError("--adam-parameters", "must be at least 1024");
  if (options.nvme_bytes < 1) throw InputError("--nvme-bytes", "must be positive");
  if (options.gpu_copy_bytes < 4096 || options.gpu_transfer_bytes < 4096)
    throw InputError("--device", "GPU copy sizes must be at least 4096 bytes");
  if (options.repeats < 1) throw InputError("--repeats", "must be at least 1");
}

std::vector<std::size_t> gpu_gemm_sizes(bool quick) {
  if (quick) return {1024, 4096};
  return {1024, 2048, 4096, 8192};
}

Calibration calibrate(Communicator& comm, const CalibrateOptions& options, DeviceCalibrator* device,
                      const CpuBackendCosts& cpu_backend) {
  validate(options);
  keep_host_heap();  // measured as the executor runs (make_backend)
  // Opened first: a bad --nvme-path fails before a minute of measurements.
  const std::unique_ptr<NvmeStore> store = options.nvme_path ? open_store(comm, options) : nullptr;
  Calibration result;
  describe_host(comm, options, result);
  if (device) {
    result.gpu = device->measure(options);
  } else {
    for (const auto n : options.gemm_sizes)
      result.gemm.push_back(measure_gemm(comm, n, options.repeats));
  }
  measure_host_memory(comm, options, result);
  result.collectives = device ? device->measure_collectives(options.message_sizes)
                              : measure_collectives(comm, options.message_sizes);
  // The drive's rates first: the CPU backend's NVMe request costs are what is left beyond them.
  if (store) result.nvme = measure_nvme(comm, options, *store);
  if (!device && cpu_backend) cpu_backend(comm, options, result);
  return result;
}

}  // namespace zerolens::exec
