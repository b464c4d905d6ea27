#include "exec/backends.hpp"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "kernels/stream.hpp"

#include "exec/memory/host_heap.hpp"
#include "exec/model/gpt2_model.hpp"
#include "sim/core/error.hpp"
// The one place outside kernels/ and exec/cuda/ that knows whether the build has CUDA (exec's
// CMakeLists defines ZEROLENS_WITH_CUDA for this library where exec/cuda is built).
#ifdef ZEROLENS_WITH_CUDA
#include "exec/cuda/calibrate_gpu.hpp"
#include "exec/cuda/cuda_backend.hpp"
#endif

namespace zerolens::exec {
namespace {

// Host memory stands in for the GPU's: the engine's buffers are host buffers, MPI reduces them.
class CpuBackend final : public Backend {
 public:
  CpuBackend()
      : Backend(make_mpi_communicator(), "CPU device backend, MPI collectives", 0,
                "the executor trains without dropout and runs on the CPU device backend (no CUDA "
                "context, workspaces or allocator fragmentation unless given)") {
    use_a_share_of_the_cores(communicator());
  }

  std::unique_ptr<LayerModel> make_model(const Model& model, const Gpt2Options& options,
                                         MemoryLedger& ledger) const override {
    return std::make_unique<Gpt2Model>(model, options, ledger);
  }
};

[[noreturn]] void refuse_unknown(const std::string& name) {
  std::string known;
  for (const std::string& candidate : backend_names()) {
    known += (known.empty() ? "" : ", ") + candidate;
  }
  throw InputError("--device", "'" + name + "' is not a device (" + known + ")");
}

// The cuda backend's pieces where the build has CUDA; elsewhere the refusal saying so.
#ifdef ZEROLENS_WITH_CUDA
std::unique_ptr<Backend> cuda_backend() {
  return make_cuda_backend();
}
std::unique_ptr<DeviceCalibrator> cuda_calibrator() {
  return make_gpu_calibrator();
}
#else
[[noreturn]] void refuse_cuda() {
  throw InputError("--device cuda", "this build has no CUDA support");
}
std::unique_ptr<Backend> cuda_backend() {
  refuse_cuda();
}
std::unique_ptr<DeviceCalibrator> cuda_calibrator() {
  refuse_cuda();
}
#endif

}  // namespace

const std::vector<std::string>& backend_names() {
  static const std::vector<std::string> names = {"cpu", "cuda"};
  return names;
}

void use_a_share_of_the_cores(const Communicator& comm) {
  if (std::getenv("OMP_NUM_THREADS") != nullptr) return;
  const int cores = std::max(1, int(std::thread::hardware_concurrency()));
  kernels::set_host_threads(std::max(1, cores / std::max(1, comm.ranks_on_node())));
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  keep_host_heap();  // a step's buffers reuse the last step's pages, as on a GPU's cached blocks
  if (name == "cpu") return std::make_unique<CpuBackend>();
  if (name != "cuda") refuse_unknown(name);
  return cuda_backend();
}

std::unique_ptr<DeviceCalibrator> make_device_calibrator(const std::string& name) {
  if (name == "cpu") return nullptr;
  if (name != "cuda") refuse_unknown(name);
  return cuda_calibrator();
}

}  // namespace zerolens::exec
