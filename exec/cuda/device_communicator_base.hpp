#pragma once
// What the NCCL and host-staged communicators share (internal to zerolens_exec_cuda): the host MPI
// communicator for scalars, reporting and barriers (counted here as MpiCommunicator counts them),
// the collective stream, and the argument checks MpiCommunicator makes.
#include <memory>
#include <string>

#include "exec/cuda/cuda_memory_space.hpp"
#include "exec/cuda/nccl_communicator.hpp"
#include "exec/memory/caching_memory_space.hpp"

namespace zerolens::exec {

class DeviceCommunicatorBase : public DeviceCommunicator {
 public:
  DeviceCommunicatorBase(std::unique_ptr<Communicator> host, int device, std::string reason);
  ~DeviceCommunicatorBase() override;
  DeviceCommunicatorBase(const DeviceCommunicatorBase&) = delete;
  DeviceCommunicatorBase& operator=(const DeviceCommunicatorBase&) = delete;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& backend_reason() const override { return reason_; }
  int cuda_device() const override { return device_; }
  // The device's memory through a caching allocator: collectives take buffers there (a run
  // places its Gpu buffers in it).
  MemorySpace* memory_space() const override { return cache_.get(); }
  cudaStream_t stream() const override { return stream_; }
  void wait_for(cudaStream_t producer) override;

  double all_reduce_max(double value, OpKind counted_as) override;
  double all_reduce_sum(double value, OpKind counted_as) override;
  float all_reduce_sum_float(float value, OpKind counted_as) override;
  bool all_reduce_flag(bool flag, OpKind counted_as) override;
  double report_sum(double value) override { return host_->report_sum(value); }
  void barrier() override { host_->barrier(); }
  using DeviceCommunicator::all_reduce_sum;

 protected:
  Communicator& host() { return *host_; }
  // Throws std::invalid_argument with MpiCommunicator's messages.
  void require_blocks(std::size_t whole, std::size_t block, const char* call) const;
  void require_counts(std::size_t input, std::span<const int> counts, std::size_t output) const;
  static void require_16bit(Precision format);

 private:
  std::unique_ptr<Communicator> host_;
  int device_ = 0;
  std::string reason_;
  std::unique_ptr<CudaMemorySpace> space_;
  std::unique_ptr<CachingMemorySpace> cache_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t producer_done_ = nullptr;
};

std::unique_ptr<DeviceCommunicator> make_nccl_communicator(std::unique_ptr<Communicator> host, int device,
                                                           std::string reason);
std::unique_ptr<DeviceCommunicator> make_staged_communicator(std::unique_ptr<Communicator> host, int device,
                                                             std::string reason);

}  // namespace zerolens::exec
