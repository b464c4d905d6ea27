// make_gpu_communicator: agree that every rank has a GPU, pick this rank's device, gather every
// rank's (host, GPU) and choose NCCL or the host-staged fallback; the same choice on every rank.
#include <mpi.h>

#include "exec/cuda/cuda_status.hpp"
#include "exec/cuda/device_communicator_base.hpp"
#include "exec/cuda/gpu_identity.hpp"

namespace zerolens::exec {
namespace {

// The rank among the processes of this node (MPI's shared-memory split), to spread ranks over GPUs.
int node_local_rank() {
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS) {
    throw std::runtime_error("MPI_Comm_split_type failed");
  }
  int local = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  return local;
}

}  // namespace

std::unique_ptr<DeviceCommunicator> make_gpu_communicator(const GpuCommunicatorOptions& options) {
  auto host = make_mpi_communicator();
  const CudaDeviceProbe probe = probe_cuda_devices();
  // Every rank learns whether all have a device before any goes further, so all throw together.
  const int mine = probe.count > 0 ? 1 : 0;
  int all = 0;
  if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS) {
    throw std::runtime_error("MPI_Allreduce of the CUDA device check failed");
  }
  if (!mine) throw NoCudaDevice("no CUDA device on rank " + std::to_string(host->rank()) + ": " + probe.reason);
  if (!all) throw NoCudaDevice("no CUDA device on another rank (this one sees " + std::to_string(probe.count) + ")");

  const int device = options.device >= 0 ? options.device : node_local_rank() % probe.count;
  if (device >= probe.count) {
    throw std::invalid_argument("CUDA device " + std::to_string(device) + " requested, " +
                                std::to_string(probe.count) + " visible");
  }
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  const std::vector<GpuIdentity> identities = gather_gpu_identities(local_gpu_identity(device));
  if (const auto shared = find_shared_gpu(identities)) {
    return make_staged_communicator(std::move(host), device,
                                    describe(*shared, identities) + ": NCCL refuses duplicate GPUs");
  }
  if (options.force_staged) return make_staged_communicator(std::move(host), device, "requested");
  return make_nccl_communicator(std::move(host), device, "every rank has its own GPU");
}

}  // namespace zerolens::exec
