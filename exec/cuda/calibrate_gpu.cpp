// The GPU measurements of `zerolens calibrate --device cuda`. Every rank measures at once (a
// barrier starts each timed run) and the slowest rank's GPU time counts, as on the host.
#include "exec/cuda/calibrate_gpu.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "exec/calibrate/calibrate_support.hpp"
#include "exec/cuda/cuda_memory.hpp"
#include "exec/cuda/cuda_status.hpp"
#include "exec/cuda/nccl_communicator.hpp"
#include "kernels/cuda/blas.hpp"
#include "kernels/cuda/matmul.hpp"
#include "kernels/cuda/precision.hpp"
#include "kernels/cuda/runtime.hpp"
#include "sim/core/error.hpp"

namespace zerolens::exec {
namespace {

template <typename T>
using Device = kernels::cuda::DeviceBuffer<T>;

constexpr double kGemmFlopsPerRun = 2e12;  // tens of ms per timed run at fp32 on an A100/H100
constexpr int kCopiesPerRun = 8;

double best(const std::vector<double>& times) {
  return *std::min_element(times.begin(), times.end());
}

// Events around the work enqueued on one stream: the GPU's time for it. The stream is a blocking
// one, so it is ordered after the synchronous uploads and memsets on the legacy default stream.
class StreamTimer {
 public:
  StreamTimer() {
    try {
      check_cuda(cudaStreamCreate(&stream_), "cudaStreamCreate");
      check_cuda(cudaEventCreate(&start_), "cudaEventCreate");
      check_cuda(cudaEventCreate(&stop_), "cudaEventCreate");
    } catch (...) {
      release();
      throw;
    }
  }
  ~StreamTimer() { release(); }
  StreamTimer(const StreamTimer&) = delete;
  StreamTimer& operator=(const StreamTimer&) = delete;
  cudaStream_t stream() const { return stream_; }

  double seconds(const std::function<void()>& enqueue) {
    check_cuda(cudaEventRecord(start_, stream_), "cudaEventRecord");
    enqueue();
    check_cuda(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float milliseconds = 0;
    check_cuda(cudaEventElapsedTime(&milliseconds, start_, stop_), "cudaEventElapsedTime");
    return milliseconds * 1e-3;
  }

 private:
  void release() noexcept {
    if (stop_) cudaEventDestroy(stop_);
    if (start_) cudaEventDestroy(start_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// `setup` (allocations, uploads, one warm-up run) then `repeats` timed runs with every rank in
// step; any rank's failure throws on every rank. Returns the best run on the slowest rank.
double best_gpu_time(Communicator& comm, StreamTimer& timer, int repeats,
                     const std::function<void()>& setup, const std::function<void()>& enqueue) {
  on_every_rank(comm, [&] {
    setup();
    timer.seconds(enqueue);
  });
  std::vector<double> times;
  for (int run = 0; run < repeats; ++run) {
    comm.barrier();
    double seconds = 0;
    on_every_rank(comm, [&] { seconds = timer.seconds(enqueue); });
    times.push_back(comm.all_reduce_max(seconds));
  }
  return best(times);
}

// n x n inputs of small varied values (not zeros: a GEMM on zeros draws less power, clocks higher).
struct GemmOperands {
  GemmOperands(std::size_t n, bool bf16, cudaStream_t stream)
      : inp(n * n), weight(n * n), out(n * n) {
    std::vector<float> values(n * n);
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = float((i * 7919) % 1000) * 1e-3f - 0.5f;
    inp.upload(values);
    weight.upload(values);
    if (!bf16) return;
    inp16 = Device<std::uint16_t>(n * n);
    weight16 = Device<std::uint16_t>(n * n);
    out16 = Device<std::uint16_t>(n * n);
    using kernels::cuda::HalfFormat;
    kernels::cuda::cast_to_half(inp16.data(), inp.data(), n * n, HalfFormat::bf16, stream);
    kernels::cuda::cast_to_half(weight16.data(), weight.data(), n * n, HalfFormat::bf16, stream);
  }
  Device<float> inp, weight, out;
  Device<std::uint16_t> inp16, weight16, out16;
};

GemmRate measure_gemm(Communicator& comm, StreamTimer& timer,
                      const kernels::cuda::BlasHandles& blas, std::size_t n, bool bf16,
                      int repeats) {
  std::unique_ptr<GemmOperands> m;
  const double flops_per_call = 2.0 * double(n) * double(n) * double(n);
  const int calls = int(std::clamp(kGemmFlopsPerRun / flops_per_call, 1.0, 1000.0));
  const cudaStream_t stream = timer.stream();
  const auto enqueue = [&] {
    for (int call = 0; call < calls; ++call) {
      if (bf16) {
        kernels::cuda::matmul_forward_bf16(m->out16.data(), m->inp16.data(), m->weight16.data(),
                                           nullptr, n, n, n, blas, stream);
      } else {
        kernels::cuda::matmul_forward(m->out.data(), m->inp.data(), m->weight.data(), nullptr, n, n,
                                      n, blas, stream);
      }
    }
  };
  const auto setup = [&] { m = std::make_unique<GemmOperands>(n, bf16, stream); };
  const double seconds = best_gpu_time(comm, timer, repeats, setup, enqueue) / calls;
  return {n, seconds, flops_per_call / seconds};
}

// A device-to-device copy reads and writes `bytes`: 2 x bytes of HBM traffic, as the simulator's
// memory_bytes_touched counts reads plus writes.
double measure_hbm(Communicator& comm, StreamTimer& timer, std::size_t bytes, int repeats) {
  Device<unsigned char> from, to;
  const auto setup = [&] {
    from = Device<unsigned char>(bytes);
    to = Device<unsigned char>(bytes);
    check_cuda(cudaMemset(from.data(), 1, bytes), "cudaMemset");
  };
  const auto enqueue = [&] {
    for (int copy = 0; copy < kCopiesPerRun; ++copy) {
      check_cuda(
          cudaMemcpyAsync(to.data(), from.data(), bytes, cudaMemcpyDeviceToDevice, timer.stream()),
          "cudaMemcpyAsync device to device");
    }
  };
  return 2.0 * double(bytes) * kCopiesPerRun / best_gpu_time(comm, timer, repeats, setup, enqueue);
}

// Pinned host <-> device copies of `bytes`, each direction on its own: bytes / time.
void measure_pcie(Communicator& comm, StreamTimer& timer, std::size_t bytes, int repeats,
                  GpuCalibration& gpu) {
  Device<unsigned char> device;
  std::shared_ptr<void> host;
  const auto setup = [&] {
    device = Device<unsigned char>(bytes);
    host = std::shared_ptr<void>(cuda_memory_detail::allocate_pinned(bytes),
                                 cuda_memory_detail::free_pinned);
  };
  const auto copies = [&](cudaMemcpyKind kind) {
    return [&, kind] {
      for (int copy = 0; copy < kCopiesPerRun; ++copy) {
        void* target = kind == cudaMemcpyHostToDevice ? device.data() : host.get();
        const void* source = kind == cudaMemcpyHostToDevice ? host.get() : device.data();
        check_cuda(cudaMemcpyAsync(target, source, bytes, kind, timer.stream()),
                   "cudaMemcpyAsync host <-> device");
      }
    };
  };
  const double total = double(bytes) * kCopiesPerRun;
  gpu.h2d_bytes_per_second =
      total / best_gpu_time(comm, timer, repeats, setup, copies(cudaMemcpyHostToDevice));
  const auto buffers_ready = [] {};
  gpu.d2h_bytes_per_second =
      total / best_gpu_time(comm, timer, repeats, buffers_ready, copies(cudaMemcpyDeviceToHost));
}

std::shared_ptr<float> device_float_array(std::size_t count) {
  return std::shared_ptr<float>(
      static_cast<float*>(cuda_memory_detail::allocate_device(count * sizeof(float))),
      [](float* data) { cuda_memory_detail::free_device(data); });
}

class GpuCalibrator final : public DeviceCalibrator {
 public:
  explicit GpuCalibrator(std::unique_ptr<DeviceCommunicator> comm) : comm_(std::move(comm)) {}

  GpuCalibration measure(const CalibrateOptions& options) override {
    GpuCalibration gpu;
    gpu.collective_backend = comm_->backend_name();
    gpu.backend_reason = comm_->backend_reason();
    std::unique_ptr<StreamTimer> timer;
    std::unique_ptr<kernels::cuda::BlasHandles> blas;
    on_every_rank(*comm_, [&] {
      describe_device(gpu);
      timer = std::make_unique<StreamTimer>();
      blas = std::make_unique<kernels::cuda::BlasHandles>();
    });
    // The smallest GPU of any rank bounds what a plan may put on each.
    gpu.memory_bytes = Bytes(-comm_->all_reduce_max(-double(gpu.memory_bytes)));
    for (const bool bf16 : {false, true}) {
      for (const auto n : options.gemm_sizes) {
        (bf16 ? gpu.gemm_bf16 : gpu.gemm_fp32)
            .push_back(measure_gemm(*comm_, *timer, *blas, n, bf16, options.repeats));
      }
    }
    // Both buffers fit beside the other ranks' even when all ranks share one GPU.
    const Bytes room = gpu.free_bytes / (4 * comm_->size()) / 4096 * 4096;
    gpu.copy_bytes = std::clamp<Bytes>(room, 4096, options.gpu_copy_bytes);
    gpu.hbm_bytes_per_second =
        measure_hbm(*comm_, *timer, std::size_t(gpu.copy_bytes), options.repeats);
    gpu.transfer_bytes = options.gpu_transfer_bytes;
    measure_pcie(*comm_, *timer, std::size_t(gpu.transfer_bytes), options.repeats, gpu);
    return gpu;
  }

  std::vector<CollectiveRate> measure_collectives(const std::vector<Bytes>& sizes) override {
    return exec::measure_collectives(*comm_, sizes, device_float_array);
  }

 private:
  void describe_device(GpuCalibration& gpu) const {
    cudaDeviceProp properties{};
    check_cuda(cudaGetDeviceProperties(&properties, comm_->cuda_device()),
               "cudaGetDeviceProperties");
    gpu.name = properties.name;
    std::size_t free = 0, total = 0;
    check_cuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    gpu.memory_bytes = Bytes(total);
    gpu.free_bytes = Bytes(free);
  }

  std::unique_ptr<DeviceCommunicator> comm_;
};

}  // namespace

std::unique_ptr<DeviceCalibrator> make_gpu_calibrator() {
  try {
    return std::make_unique<GpuCalibrator>(make_gpu_communicator());
  } catch (const NoCudaDevice& error) {
    throw InputError("--device cuda", error.what());
  }
}

}  // namespace zerolens::exec
