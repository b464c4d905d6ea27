#include "exec/cuda/device_communicator_base.hpp"

#include <stdexcept>
#include <utility>

#include "exec/cuda/cuda_status.hpp"

namespace zerolens::exec {

DeviceCommunicatorBase::DeviceCommunicatorBase(std::unique_ptr<Communicator> host, int device, std::string reason)
    : host_(std::move(host)), device_(device), reason_(std::move(reason)),
      space_(std::make_unique<CudaMemorySpace>(device)),
      cache_(std::make_unique<CachingMemorySpace>(*space_)) {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  // A blocking stream (not cudaStreamNonBlocking): it waits for the legacy default stream, so
  // buffers filled there by synchronous copies and default-stream kernels are ready without a call.
  check_cuda(cudaStreamCreate(&stream_), "cudaStreamCreate");
  const cudaError_t status = cudaEventCreateWithFlags(&producer_done_, cudaEventDisableTiming);
  if (status != cudaSuccess) {
    cudaStreamDestroy(stream_);
    check_cuda(status, "cudaEventCreateWithFlags");
  }
}

DeviceCommunicatorBase::~DeviceCommunicatorBase() {
  cudaEventDestroy(producer_done_);
  cudaStreamDestroy(stream_);
}

void DeviceCommunicatorBase::wait_for(cudaStream_t producer) {
  check_cuda(cudaEventRecord(producer_done_, producer), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(stream_, producer_done_, 0), "cudaStreamWaitEvent");
}

// Host values: the host communicator reduces them, this one counts them as MpiCommunicator does.
double DeviceCommunicatorBase::all_reduce_max(double value, OpKind counted_as) {
  const double result = host_->all_reduce_max(value, counted_as);
  record(counted_as, Bytes(sizeof(double)));
  return result;
}

double DeviceCommunicatorBase::all_reduce_sum(double value, OpKind counted_as) {
  const double result = host_->all_reduce_sum(value, counted_as);
  record(counted_as, Bytes(sizeof(double)));
  return result;
}

float DeviceCommunicatorBase::all_reduce_sum_float(float value, OpKind counted_as) {
  const float result = host_->all_reduce_sum_float(value, counted_as);
  record(counted_as, Bytes(sizeof(float)));
  return result;
}

bool DeviceCommunicatorBase::all_reduce_flag(bool flag, OpKind counted_as) {
  const bool result = host_->all_reduce_flag(flag, counted_as);
  record(counted_as, Bytes(1));
  return result;
}

void DeviceCommunicatorBase::require_blocks(std::size_t whole, std::size_t block, const char* call) const {
  if (whole != block * std::size_t(size())) {
    throw std::invalid_argument(std::string(call) + ": the whole buffer must be ranks x the block");
  }
}

void DeviceCommunicatorBase::require_counts(std::size_t input, std::span<const int> counts,
                                            std::size_t output) const {
  if (counts.size() != std::size_t(size())) throw std::invalid_argument("reduce_scatter_sum: one count per rank");
  std::size_t total = 0;
  for (const int count : counts) {
    if (count < 0) throw std::invalid_argument("reduce_scatter_sum: a negative count");
    total += std::size_t(count);
  }
  if (total != input || output != std::size_t(counts[std::size_t(rank())])) {
    throw std::invalid_argument("reduce_scatter_sum: counts must sum to the input, this rank's count to the output");
  }
}

void DeviceCommunicatorBase::require_16bit(Precision format) {
  if (format == Precision::Fp32) throw std::invalid_argument("16-bit collective with fp32 format");
}

}  // namespace zerolens::exec
