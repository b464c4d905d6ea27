// The NCCL communicator: one ncclComm_t over MPI_COMM_WORLD, bootstrapped over MPI (rank 0 makes
// the unique id, MPI_Bcast hands it out), every collective on the collective stream.
#include <mpi.h>

#include <thread>

#include "exec/cuda/cuda_status.hpp"
#include "exec/cuda/device_communicator_base.hpp"

namespace zerolens::exec {
namespace {

ncclDataType_t nccl_16bit_type(Precision format) {
  return format == Precision::Fp16 ? ncclFloat16 : ncclBfloat16;
}

class NcclCommunicator final : public DeviceCommunicatorBase {
 public:
  NcclCommunicator(std::unique_ptr<Communicator> host, int device, std::string reason)
      : DeviceCommunicatorBase(std::move(host), device, std::move(reason)) {
    // Rank 0's failure to make an id travels with the id, so no rank waits in ncclCommInitRank.
    struct {
      ncclUniqueId id;
      ncclResult_t status;
    } bootstrap{};
    if (rank() == 0) bootstrap.status = ncclGetUniqueId(&bootstrap.id);
    if (MPI_Bcast(&bootstrap, int(sizeof bootstrap), MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) {
      throw std::runtime_error("MPI_Bcast of the NCCL unique id failed");
    }
    check_nccl(bootstrap.status, "ncclGetUniqueId (on rank 0)");
    check_nccl(ncclCommInitRank(&comm_, size(), bootstrap.id, rank()), "ncclCommInitRank");
  }
  ~NcclCommunicator() override {
    if (comm_) ncclCommDestroy(comm_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  using DeviceCommunicatorBase::all_reduce_sum;
  const char* backend_name() const override { return "nccl"; }

  void all_reduce_sum(std::span<float> buffer) override {
    all_reduce(buffer.data(), buffer.size(), ncclFloat32);
    record(OpKind::AllReduce, Bytes(buffer.size_bytes()));
  }
  void reduce_scatter_sum(std::span<const float> input, std::span<float> output) override {
    require_blocks(input.size(), output.size(), "reduce_scatter_sum");
    reduce_scatter(input.data(), output.data(), output.size(), ncclFloat32);
    record(OpKind::ReduceScatter, Bytes(input.size_bytes()));
  }
  void reduce_scatter_sum(std::span<const float> input, std::span<const int> counts,
                          std::span<float> output) override {
    require_counts(input.size(), counts, output.size());
    reduce_scatter_uneven(input.data(), counts, output.data(), ncclFloat32, sizeof(float));
    record(OpKind::ReduceScatter, Bytes(input.size_bytes()));
  }
  void all_gather(std::span<const float> input, std::span<float> output) override {
    require_blocks(output.size(), input.size(), "all_gather");
    gather(input.data(), output.data(), input.size(), ncclFloat32);
    record(OpKind::AllGather, Bytes(output.size_bytes()));
  }
  void broadcast(std::span<float> buffer, int root) override {
    run(ncclBroadcast(buffer.data(), buffer.data(), buffer.size(), ncclFloat32, root, comm_, stream()),
        "ncclBroadcast");
    record(OpKind::Broadcast, Bytes(buffer.size_bytes()));
  }

  void all_reduce_sum(std::span<std::uint16_t> buffer, Precision format) override {
    require_16bit(format);
    all_reduce(buffer.data(), buffer.size(), nccl_16bit_type(format));
    record(OpKind::AllReduce, Bytes(buffer.size_bytes()));
  }
  void reduce_scatter_sum(std::span<const std::uint16_t> input, std::span<std::uint16_t> output,
                          Precision format) override {
    require_16bit(format);
    require_blocks(input.size(), output.size(), "reduce_scatter_sum");
    reduce_scatter(input.data(), output.data(), output.size(), nccl_16bit_type(format));
    record(OpKind::ReduceScatter, Bytes(input.size_bytes()));
  }
  void reduce_scatter_sum(std::span<const std::uint16_t> input, std::span<const int> counts,
                          std::span<std::uint16_t> output, Precision format) override {
    require_16bit(format);
    require_counts(input.size(), counts, output.size());
    reduce_scatter_uneven(input.data(), counts, output.data(), nccl_16bit_type(format), sizeof(std::uint16_t));
    record(OpKind::ReduceScatter, Bytes(input.size_bytes()));
  }
  void all_gather(std::span<const std::uint16_t> input, std::span<std::uint16_t> output) override {
    require_blocks(output.size(), input.size(), "all_gather");
    gather(input.data(), output.data(), input.size(), ncclFloat16);  // a copy: any 2-byte type
    record(OpKind::AllGather, Bytes(output.size_bytes()));
  }

 private:
  void all_reduce(void* buffer, std::size_t count, ncclDataType_t type) {
    run(ncclAllReduce(buffer, buffer, count, type, ncclSum, comm_, stream()), "ncclAllReduce");
  }
  void reduce_scatter(const void* input, void* output, std::size_t block, ncclDataType_t type) {
    run(ncclReduceScatter(input, output, block, type, ncclSum, comm_, stream()), "ncclReduceScatter");
  }
  // In place when `input` is this rank's block of `output` (NCCL's convention, as MpiCommunicator's).
  void gather(const void* input, void* output, std::size_t block, ncclDataType_t type) {
    run(ncclAllGather(input, output, block, type, comm_, stream()), "ncclAllGather");
  }

  // NCCL has no reduce-scatter with per-rank counts: one ncclReduce per destination rank, grouped
  // so NCCL launches them together; rank r reduces block r into its output.
  void reduce_scatter_uneven(const void* input, std::span<const int> counts, void* output, ncclDataType_t type,
                             std::size_t element_bytes) {
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    ncclResult_t first_failure = ncclSuccess;
    std::size_t offset = 0;
    for (int r = 0; r < size() && first_failure == ncclSuccess; ++r) {
      const auto count = std::size_t(counts[std::size_t(r)]);
      const void* block = static_cast<const char*>(input) + offset * element_bytes;
      // recvbuff is used on the root only (NCCL ignores it elsewhere).
      first_failure = ncclReduce(block, r == rank() ? output : nullptr, count, type, ncclSum, r, comm_, stream());
      offset += count;
    }
    const ncclResult_t ended = ncclGroupEnd();  // always closes the group, even after a failure
    check_nccl(first_failure, "ncclReduce");
    run(ended, "ncclGroupEnd");
  }

  // Waits for the collective, polling NCCL's asynchronous error so a failed peer or network
  // surfaces as an exception instead of a hang; the communicator is aborted after one.
  void run(ncclResult_t status, const char* call) {
    check_nccl(status, call);
    for (;;) {
      const cudaError_t done = cudaStreamQuery(stream());
      if (done == cudaSuccess) return;
      if (done != cudaErrorNotReady) check_cuda(done, "cudaStreamQuery");
      ncclResult_t async = ncclSuccess;
      check_nccl(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
      if (async != ncclSuccess && async != ncclInProgress) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        check_nccl(async, call);
      }
      std::this_thread::yield();
    }
  }

  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<DeviceCommunicator> make_nccl_communicator(std::unique_ptr<Communicator> host, int device,
                                                           std::string reason) {
  return std::make_unique<NcclCommunicator>(std::move(host), device, std::move(reason));
}

}  // namespace zerolens::exec
