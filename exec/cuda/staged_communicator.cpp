// The fallback when ranks share a GPU: each collective copies its device input to the host, runs
// the host MPI communicator's collective there and copies the result back, all on the collective
// stream. Results and counts are MpiCommunicator's by construction.
#include <vector>

#include "exec/cuda/cuda_status.hpp"
#include "exec/cuda/device_communicator_base.hpp"

namespace zerolens::exec {
namespace {

class StagedCommunicator final : public DeviceCommunicatorBase {
 public:
  using DeviceCommunicatorBase::DeviceCommunicatorBase;
  using DeviceCommunicatorBase::all_reduce_sum;
  const char* backend_name() const override { return "mpi-staged"; }

  void all_reduce_sum(std::span<float> buffer) override {
    auto host_buffer = download<float>(buffer);
    host().all_reduce_sum(host_buffer);
    upload(buffer, host_buffer);
    record(OpKind::AllReduce, bytes(buffer));
  }
  void reduce_scatter_sum(std::span<const float> input, std::span<float> output) override {
    require_blocks(input.size(), output.size(), "reduce_scatter_sum");
    const auto host_input = download(input);
    std::vector<float> host_output(output.size());
    host().reduce_scatter_sum(host_input, host_output);
    upload(output, host_output);
    record(OpKind::ReduceScatter, bytes(input));
  }
  void reduce_scatter_sum(std::span<const float> input, std::span<const int> counts,
                          std::span<float> output) override {
    require_counts(input.size(), counts, output.size());
    const auto host_input = download(input);
    std::vector<float> host_output(output.size());
    host().reduce_scatter_sum(host_input, counts, host_output);
    upload(output, host_output);
    record(OpKind::ReduceScatter, bytes(input));
  }
  void all_gather(std::span<const float> input, std::span<float> output) override {
    require_blocks(output.size(), input.size(), "all_gather");
    const auto host_input = download(input);  // separate host buffers: in place or not alike
    std::vector<float> host_output(output.size());
    host().all_gather(host_input, host_output);
    upload(output, host_output);
    record(OpKind::AllGather, bytes(output));
  }
  void broadcast(std::span<float> buffer, int root) override {
    auto host_buffer = rank() == root ? download<float>(buffer) : std::vector<float>(buffer.size());
    host().broadcast(host_buffer, root);
    upload(buffer, host_buffer);
    record(OpKind::Broadcast, bytes(buffer));
  }

  void all_reduce_sum(std::span<std::uint16_t> buffer, Precision format) override {
    require_16bit(format);
    auto host_buffer = download<std::uint16_t>(buffer);
    host().all_reduce_sum(host_buffer, format);
    upload(buffer, host_buffer);
    record(OpKind::AllReduce, bytes(buffer));
  }
  void reduce_scatter_sum(std::span<const std::uint16_t> input, std::span<std::uint16_t> output,
                          Precision format) override {
    require_16bit(format);
    require_blocks(input.size(), output.size(), "reduce_scatter_sum");
    const auto host_input = download(input);
    std::vector<std::uint16_t> host_output(output.size());
    host().reduce_scatter_sum(host_input, host_output, format);
    upload(output, host_output);
    record(OpKind::ReduceScatter, bytes(input));
  }
  void reduce_scatter_sum(std::span<const std::uint16_t> input, std::span<const int> counts,
                          std::span<std::uint16_t> output, Precision format) override {
    require_16bit(format);
    require_counts(input.size(), counts, output.size());
    const auto host_input = download(input);
    std::vector<std::uint16_t> host_output(output.size());
    host().reduce_scatter_sum(host_input, counts, host_output, format);
    upload(output, host_output);
    record(OpKind::ReduceScatter, bytes(input));
  }
  void all_gather(std::span<const std::uint16_t> input, std::span<std::uint16_t> output) override {
    require_blocks(output.size(), input.size(), "all_gather");
    const auto host_input = download(input);
    std::vector<std::uint16_t> host_output(output.size());
    host().all_gather(host_input, host_output);
    upload(output, host_output);
    record(OpKind::AllGather, bytes(output));
  }

 private:
  template <typename T>
  static Bytes bytes(std::span<T> elements) {
    return Bytes(elements.size_bytes());
  }

  // On the collective stream, so wait_for() orders the copies after their producers.
  template <typename T>
  std::vector<T> download(std::span<const T> device) {
    std::vector<T> host_copy(device.size());
    if (!device.empty()) {
      check_cuda(cudaMemcpyAsync(host_copy.data(), device.data(), device.size_bytes(), cudaMemcpyDeviceToHost,
                                 stream()),
                 "cudaMemcpyAsync to host");
      check_cuda(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
    }
    return host_copy;
  }

  template <typename T>
  void upload(std::span<T> device, const std::vector<T>& host_copy) {
    if (device.empty()) return;
    check_cuda(cudaMemcpyAsync(device.data(), host_copy.data(), device.size_bytes(), cudaMemcpyHostToDevice,
                               stream()),
               "cudaMemcpyAsync to device");
    check_cuda(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  }
};

}  // namespace

std::unique_ptr<DeviceCommunicator> make_staged_communicator(std::unique_ptr<Communicator> host, int device,
                                                             std::string reason) {
  return std::make_unique<StagedCommunicator>(std::move(host), device, std::move(reason));
}

}  // namespace zerolens::exec
