#pragma once
// The CUDA device backend (exec/run/backend.hpp; built by name in exec/backends.hpp as "cuda"):
// each rank's GPU through make_gpu_communicator (NCCL, or MPI on host-staged copies where ranks
// share a GPU), the engine's buffers in its caching allocator over the GPU's memory, GPT-2 as
// CudaGpt2Model. Built only in CUDA builds; callers reach it through exec::make_backend("cuda").
#include <memory>

#include "exec/run/backend.hpp"

namespace zerolens::exec {

// The cuBLAS GEMM workspace CudaGpt2Model allocates (kernels::cuda::BlasHandles' default size):
// the LibraryWorkspace a plan for the CUDA backend counts per rank.
Bytes cuda_library_workspace_bytes();

// Collective over MPI_COMM_WORLD. Throws InputError("--device cuda", "no CUDA device on rank R:
// ...") on every rank when any rank has no GPU.
std::unique_ptr<Backend> make_cuda_backend();

}  // namespace zerolens::exec
