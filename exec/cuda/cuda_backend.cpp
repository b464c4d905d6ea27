#include "exec/cuda/cuda_backend.hpp"

#include <string>
#include <utility>

#include "exec/cuda/gpt2_cuda_model.hpp"
#include "exec/cuda/nccl_communicator.hpp"
#include "kernels/cuda/blas.hpp"
#include "sim/core/error.hpp"

namespace zerolens::exec {
namespace {

std::string cuda_plan_note() {
  return "the executor trains without dropout on the CUDA device backend: the plan counts its " +
         std::to_string(cuda_library_workspace_bytes() >> 20) +
         " MiB cuBLAS workspace, not the CUDA context or NCCL's buffers (outside the ledger) nor "
         "allocator fragmentation (one cudaMalloc per buffer), unless given";
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::unique_ptr<DeviceCommunicator> communicator, std::string description)
      : Backend(std::move(communicator), std::move(description), cuda_library_workspace_bytes(),
                cuda_plan_note()) {}

  std::unique_ptr<LayerModel> make_model(const Model& model, const Gpt2Options& options,
                                         MemoryLedger& ledger) const override {
    return std::make_unique<CudaGpt2Model>(model, options, ledger);
  }
};

std::string describe(const DeviceCommunicator& communicator) {
  return "CUDA device backend (GPU " + std::to_string(communicator.cuda_device()) + "), " +
         communicator.backend_name() + " collectives";
}

}  // namespace

Bytes cuda_library_workspace_bytes() {
  return Bytes(kernels::cuda::BlasHandles::default_workspace_bytes);
}

std::unique_ptr<Backend> make_cuda_backend() {
  std::unique_ptr<DeviceCommunicator> communicator;
  try {
    communicator = make_gpu_communicator();
  } catch (const NoCudaDevice& error) {
    throw InputError("--device cuda", error.what());
  }
  std::string description = describe(*communicator);
  return std::make_unique<CudaBackend>(std::move(communicator), std::move(description));
}

}  // namespace zerolens::exec
