#pragma once
// Which physical GPU each rank drives, to decide between NCCL and the host-staged fallback: NCCL
// refuses a communicator in which two ranks use the same GPU. The decision is a pure function of
// every rank's identity, gathered over MPI, so all ranks take the same one.
#include <array>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace zerolens::exec {

struct GpuIdentity {
  std::string host;  // the node (MPI processor name)
  std::string gpu;   // the GPU's UUID ("GPU-8c0e..."), or its PCI bus id when it has none
  friend bool operator==(const GpuIdentity&, const GpuIdentity&) = default;
};

// Two ranks share a GPU when they name the same GPU on the same host (PCI bus ids repeat across
// hosts; an unknown, empty id counts as the same, so an unidentified GPU never reaches NCCL).
struct SharedGpu {
  int first_rank = 0;
  int second_rank = 0;
};
std::optional<SharedGpu> find_shared_gpu(std::span<const GpuIdentity> ranks);  // the first pair
bool ranks_share_a_gpu(std::span<const GpuIdentity> ranks);
// "ranks 0 and 1 share GPU-... on node-a"
std::string describe(const SharedGpu& shared, std::span<const GpuIdentity> ranks);

// nvidia-smi's spelling of a 16-byte CUDA UUID: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
std::string format_gpu_uuid(std::span<const unsigned char, 16> bytes);

// The fixed-size record each rank contributes to the MPI_Allgather (NUL-padded, truncated fields).
inline constexpr std::size_t kGpuIdentityHostChars = 256;
inline constexpr std::size_t kGpuIdentityGpuChars = 64;
using GpuIdentityRecord = std::array<char, kGpuIdentityHostChars + kGpuIdentityGpuChars>;
GpuIdentityRecord encode(const GpuIdentity& identity);
GpuIdentity decode(const GpuIdentityRecord& record);

// This rank's identity for CUDA device `device` (throws naming the CUDA call), and every rank's in
// rank order (collective over MPI_COMM_WORLD).
GpuIdentity local_gpu_identity(int device);
std::vector<GpuIdentity> gather_gpu_identities(const GpuIdentity& mine);

}  // namespace zerolens::exec
