// The backend factory (exec/backends.hpp): its names; the refusals, each naming --device and why
// (an unknown name; cuda without a GPU, or in a build without CUDA); the CPU backend's pieces; and
// the CUDA backend's library workspace, which is the kernels' own constant, not a copy of it.
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "exec/backends.hpp"
#include "exec/model/gpt2_model.hpp"
#include "sim/core/error.hpp"
#include "sim/model/model.hpp"
#include "sim/model/presets.hpp"
#ifdef ZEROLENS_WITH_CUDA
#include "exec/cuda/cuda_backend.hpp"
#include "exec/cuda/cuda_status.hpp"
#include "exec/cuda/gpt2_cuda_model.hpp"
#include "kernels/cuda/blas.hpp"
#endif

namespace zerolens::exec {
namespace {

// What asking for cuda must say here; nullopt where a GPU is present.
std::optional<std::string> expected_cuda_refusal() {
#ifdef ZEROLENS_WITH_CUDA
  const CudaDeviceProbe probe = probe_cuda_devices();
  if (probe.count > 0) return std::nullopt;
  return "--device cuda: no CUDA device on rank 0: " + probe.reason;
#else
  return "--device cuda: this build has no CUDA support";
#endif
}

// The InputError `call` throws, as "where: why".
std::string refusal_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const InputError& error) {
    return error.what();
  }
  return "(no InputError)";
}

Model tiny_gpt2() {
  TransformerShape shape = *model_from_preset("gpt2-tiny").shape;
  shape.dropout = 0;  // the executor trains without dropout
  return build_transformer("gpt2-tiny", shape);
}

TEST(Backend, NamesAreCpuThenCuda) {
  EXPECT_EQ(backend_names(), (std::vector<std::string>{"cpu", "cuda"}));
}

TEST(Backend, AnUnknownNameIsRefusedNamingTheFlagAndTheNames) {
  const std::string expected = "--device: 'tpu' is not a device (cpu, cuda)";
  EXPECT_EQ(refusal_of([] { make_backend("tpu"); }), expected);
  EXPECT_EQ(refusal_of([] { make_device_calibrator("tpu"); }), expected);
  EXPECT_EQ(refusal_of([] { make_backend("CPU"); }), "--device: 'CPU' is not a device (cpu, cuda)");
}

TEST(Backend, CudaWithoutAGpuOrWithoutCudaInTheBuildIsRefusedSayingWhy) {
  const std::optional<std::string> expected = expected_cuda_refusal();
  if (!expected) GTEST_SKIP() << "a CUDA device is present; this checks the behaviour without one";
  EXPECT_EQ(refusal_of([] { make_backend("cuda"); }), *expected);
  EXPECT_EQ(refusal_of([] { make_device_calibrator("cuda"); }), *expected);
}

TEST(Backend, CpuTrainsGpt2OnHostMemoryOverMpi) {
  const std::unique_ptr<Backend> backend = make_backend("cpu");
  EXPECT_EQ(backend->description(), "CPU device backend, MPI collectives");
  EXPECT_EQ(backend->communicator().size(), 1);  // started without mpirun
  EXPECT_EQ(backend->memory_space(), nullptr);   // host memory
  EXPECT_EQ(backend->library_workspace_bytes(), 0);
  EXPECT_EQ(backend->plan_note(),
            "the executor trains without dropout and runs on the CPU device backend (no CUDA "
            "context, workspaces or allocator fragmentation unless given)");
  MemoryLedger ledger;
  const auto model = backend->model_factory()(tiny_gpt2(), Gpt2Options{}, ledger);
  EXPECT_NE(dynamic_cast<const Gpt2Model*>(model.get()), nullptr);
  EXPECT_EQ(make_device_calibrator("cpu"), nullptr);  // ranks measured as the CPU backend's GPUs
}

#ifdef ZEROLENS_WITH_CUDA
TEST(Backend, CudaCountsTheKernelsOwnCublasWorkspace) {
  const Bytes kernels_workspace = Bytes(kernels::cuda::BlasHandles::default_workspace_bytes);
  EXPECT_EQ(cuda_library_workspace_bytes(), kernels_workspace);
  const CudaDeviceProbe probe = probe_cuda_devices();
  if (probe.count == 0) GTEST_SKIP() << "no CUDA device: " << probe.reason;
  const std::unique_ptr<Backend> backend = make_backend("cuda");
  EXPECT_EQ(backend->library_workspace_bytes(), kernels_workspace);
  EXPECT_NE(backend->memory_space(), nullptr);  // the GPU's memory
  EXPECT_NE(backend->description().find("CUDA device backend (GPU "), std::string::npos);
  EXPECT_EQ(backend->plan_note(),
            "the executor trains without dropout on the CUDA device backend: the plan counts its "
            "32 MiB cuBLAS workspace, not the CUDA context or NCCL's buffers (outside the ledger) "
            "nor allocator fragmentation (one cudaMalloc per buffer), unless given");
  MemoryLedger ledger;
  ledger.place(Device::Gpu, backend->memory_space());
  const auto model = backend->model_factory()(tiny_gpt2(), Gpt2Options{}, ledger);
  EXPECT_NE(dynamic_cast<const CudaGpt2Model*>(model.get()), nullptr);
}
#else
TEST(Backend, CudaCountsTheKernelsOwnCublasWorkspace) {
  GTEST_SKIP() << "this build has no CUDA: no cuda backend, no kernels' workspace";
}
#endif

}  // namespace
}  // namespace zerolens::exec
