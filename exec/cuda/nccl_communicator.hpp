#pragma once
// Collectives on GPU memory: the Communicator interface whose float/uint16 spans are device
// pointers. NCCL when every rank drives its own GPU; when ranks share one (NCCL refuses duplicate
// GPUs in a communicator) the same collectives go through MPI on host-staged copies, so N ranks run
// on a machine with one GPU. Either way the counts are MpiCommunicator's (nccl-tests' convention),
// and the scalar control reductions, which are host values, go through MPI.
#include <cuda_runtime_api.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "exec/comm/communicator.hpp"

namespace zerolens::exec {

class DeviceCommunicator : public Communicator {
 public:
  // "nccl" or "mpi-staged", and why that one was chosen (for `zerolens run` to print).
  virtual const char* backend_name() const = 0;
  virtual const std::string& backend_reason() const = 0;
  virtual int cuda_device() const = 0;  // made current on this thread by the factory
  // The collectives' own stream. Every call returns once its collective is complete (the engine's
  // blocking contract, as with MPI), so results are ready for any stream and for the host.
  virtual cudaStream_t stream() const = 0;
  // Orders the next collectives after the work enqueued on `producer` so far (an event, no host
  // wait). Work on the legacy default stream needs no call: stream() synchronizes with it.
  virtual void wait_for(cudaStream_t producer) = 0;
};

// Thrown on every rank when any rank sees no CUDA device (so no rank is left waiting in a
// collective); the message names the call that found none.
class NoCudaDevice : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct GpuCommunicatorOptions {
  int device = -1;            // the CUDA device; -1: the node-local rank modulo the visible devices
  bool force_staged = false;  // MPI on host-staged copies even where NCCL could run (for comparisons)
};

// Collective over MPI_COMM_WORLD, the data-parallel group here (MPI is initialised as by
// make_mpi_communicator). Gathers every rank's (host, GPU) to choose the backend; any NCCL or CUDA
// failure throws std::runtime_error naming the call and the library's error string. NCCL's own
// device buffers are not in any ledger: take DriverMemorySnapshots around this call and charge the
// growth as LibraryWorkspace (cuda_memory.hpp).
std::unique_ptr<DeviceCommunicator> make_gpu_communicator(const GpuCommunicatorOptions& options = {});

}  // namespace zerolens::exec
