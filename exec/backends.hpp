#pragma once
// The device backend of a training run, assembled in one place from its name: "cpu" (host memory
// stands in for the GPU's, MPI collectives, Gpt2Model) or "cuda" (each rank's GPU: NCCL or
// host-staged MPI collectives, the caching allocator over the GPU's memory, CudaGpt2Model).
// Callers name a backend and need no CUDA header or build flag: whether this build and machine
// can run it is decided here (backends.cpp, the only file that knows whether CUDA is built) and
// refused as an InputError naming --device, the flag every caller takes the name from.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "exec/calibrate/calibrate.hpp"
#include "exec/run/backend.hpp"

namespace zerolens::exec {

// The names make_backend accepts, "cpu" then "cuda" (a build without CUDA lists cuda too and
// refuses it, saying why).
const std::vector<std::string>& backend_names();

// Collective over MPI_COMM_WORLD (MPI is initialised as by make_mpi_communicator). Throws
// InputError "--device: '<name>' is not a device (cpu, cuda)" for an unknown name, and
// "--device cuda: <why>" on every rank when cuda cannot run: the build has no CUDA, or a rank has
// no GPU ("no CUDA device on rank R: <the probe's failing call and error>").
std::unique_ptr<Backend> make_backend(const std::string& name);

// OpenMP and OpenBLAS start a thread per core in every rank: 4 ranks on 2 cores ran 8 threads that
// wait by spinning, and a gpt2-tiny step 10 times as long (250 ms against 21). Unless
// OMP_NUM_THREADS says otherwise, this rank's host kernels run its share of the node's cores
// (cores / `comm`'s ranks on the node, at least one). The CPU backend and calibrate call it.
void use_a_share_of_the_cores(const Communicator& comm);

// The GPU side of `zerolens calibrate --device <name>` (exec/calibrate/calibrate.hpp): nullptr for
// cpu, whose ranks are measured as the CPU backend's GPUs. Collective; throws as make_backend does.
std::unique_ptr<DeviceCalibrator> make_device_calibrator(const std::string& name);

}  // namespace zerolens::exec
