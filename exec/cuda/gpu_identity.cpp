#include "exec/cuda/gpu_identity.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "exec/cuda/cuda_status.hpp"

namespace zerolens::exec {

std::optional<SharedGpu> find_shared_gpu(std::span<const GpuIdentity> ranks) {
  for (std::size_t second = 1; second < ranks.size(); ++second) {
    for (std::size_t first = 0; first < second; ++first) {
      if (ranks[first] == ranks[second]) return SharedGpu{int(first), int(second)};
    }
  }
  return std::nullopt;
}

bool ranks_share_a_gpu(std::span<const GpuIdentity> ranks) { return find_shared_gpu(ranks).has_value(); }

std::string describe(const SharedGpu& shared, std::span<const GpuIdentity> ranks) {
  const GpuIdentity& gpu = ranks[std::size_t(shared.first_rank)];
  return "ranks " + std::to_string(shared.first_rank) + " and " + std::to_string(shared.second_rank) +
         " share GPU " + (gpu.gpu.empty() ? "(unidentified)" : gpu.gpu) + " on " + gpu.host;
}

std::string format_gpu_uuid(std::span<const unsigned char, 16> bytes) {
  std::string text = "GPU-";
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", unsigned(bytes[i]));
    text += hex;
  }
  return text;
}

GpuIdentityRecord encode(const GpuIdentity& identity) {
  GpuIdentityRecord record{};
  // One byte of each field stays NUL, so decode always finds the end.
  std::copy_n(identity.host.begin(), std::min(identity.host.size(), kGpuIdentityHostChars - 1), record.begin());
  std::copy_n(identity.gpu.begin(), std::min(identity.gpu.size(), kGpuIdentityGpuChars - 1),
              record.begin() + kGpuIdentityHostChars);
  return record;
}

GpuIdentity decode(const GpuIdentityRecord& record) {
  const auto field = [&](std::size_t offset, std::size_t size) {
    const char* begin = record.data() + offset;
    return std::string(begin, std::find(begin, begin + size, '\0'));
  };
  return {field(0, kGpuIdentityHostChars), field(kGpuIdentityHostChars, kGpuIdentityGpuChars)};
}

GpuIdentity local_gpu_identity(int device) {
  GpuIdentity identity;
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  if (MPI_Get_processor_name(host, &length) != MPI_SUCCESS) throw std::runtime_error("MPI_Get_processor_name failed");
  identity.host.assign(host, std::size_t(length));
  cudaDeviceProp properties{};
  check_cuda(cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties");
  std::array<unsigned char, 16> uuid{};
  std::copy_n(reinterpret_cast<const unsigned char*>(properties.uuid.bytes), uuid.size(), uuid.begin());
  if (std::any_of(uuid.begin(), uuid.end(), [](unsigned char b) { return b != 0; })) {
    identity.gpu = format_gpu_uuid(uuid);
  } else {
    char bus_id[32] = {};
    check_cuda(cudaDeviceGetPCIBusId(bus_id, int(sizeof bus_id), device), "cudaDeviceGetPCIBusId");
    identity.gpu = bus_id;
  }
  return identity;
}

std::vector<GpuIdentity> gather_gpu_identities(const GpuIdentity& mine) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const GpuIdentityRecord record = encode(mine);
  std::vector<GpuIdentityRecord> records(static_cast<std::size_t>(size));
  if (MPI_Allgather(record.data(), int(record.size()), MPI_CHAR, records.data(), int(record.size()), MPI_CHAR,
                    MPI_COMM_WORLD) != MPI_SUCCESS) {
    throw std::runtime_error("MPI_Allgather of the GPU identities failed");
  }
  std::vector<GpuIdentity> identities;
  for (const auto& each : records) identities.push_back(decode(each));
  return identities;
}

}  // namespace zerolens::exec
