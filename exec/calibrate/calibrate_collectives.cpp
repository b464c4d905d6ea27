// Collective bandwidth by message size, as nccl-tests measures it: the mean time per call on the
// slowest rank, algbw = S / t, busbw = the bytes each rank sends in the ring algorithm / t.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "exec/calibrate/calibrate_support.hpp"
#include "sim/schedule/comm.hpp"

namespace zerolens::exec {
namespace {

// Calls per timed batch: enough that small messages are not all latency noise.
int calls_for(Bytes bytes) {
  return int(std::clamp<Bytes>((Bytes{64} << 20) / bytes, 5, 200));
}

// The elements of a message of about `requested` bytes: an all-gather and a reduce-scatter need
// equal blocks of whole elements per rank (`block`), the whole message is `whole`.
struct MessageShape {
  std::size_t block = 1, whole = 1;
};
MessageShape message_shape(OpKind kind, Bytes requested, std::size_t element_bytes, int ranks) {
  const std::size_t elements = std::size_t(requested) / element_bytes;
  const std::size_t block = std::max<std::size_t>(1, elements / std::size_t(ranks));
  return {block, kind == OpKind::AllReduce ? std::max<std::size_t>(1, elements)
                                           : block * std::size_t(ranks)};
}

// `call` (one collective of `bytes`) after a warm-up call, timed in a batch of
// calls_for(requested).
CollectiveRate timed_collective(Communicator& comm, OpKind kind, Bytes requested, Bytes bytes,
                                const std::function<void()>& call) {
  const int calls = calls_for(requested);
  call();  // warm-up
  const double batch = timed_runs(comm, 1, [&] {
    for (int i = 0; i < calls; ++i) call();
  })[0];
  const double seconds = batch / calls;
  return {kind, bytes, seconds, double(bytes) / seconds,
          bus_bandwidth(kind, bytes, comm.size(), seconds)};
}

CollectiveRate measure(Communicator& comm, OpKind kind, Bytes requested,
                       const FloatArrayAllocator& allocate) {
  const auto [block, whole] = message_shape(kind, requested, sizeof(float), comm.size());
  // Zeros: repeated sums stay finite.
  const std::shared_ptr<float> input_array = allocate(whole), output_array = allocate(whole);
  const std::span<float> input(input_array.get(), whole), output(output_array.get(), whole);
  return timed_collective(comm, kind, requested, Bytes(whole * sizeof(float)), [&] {
    switch (kind) {
      case OpKind::AllReduce:
        comm.all_reduce_sum(input);
        break;
      case OpKind::AllGather:
        comm.all_gather(input.first(block), output);
        break;
      default:
        comm.reduce_scatter_sum(input, output.first(block));
        break;
    }
  });
}

// A 16-bit reduction (all-reduce or reduce-scatter of bf16 in host memory, reduced by the
// communicator's user-defined MPI op), the message size S in bytes of 2-byte elements.
CollectiveRate measure_16bit(Communicator& comm, OpKind kind, Bytes requested) {
  const auto [block, whole] = message_shape(kind, requested, sizeof(std::uint16_t), comm.size());
  std::vector<std::uint16_t> input(whole, 0), output(whole, 0);  // bf16 zeros: sums stay finite
  const std::span<std::uint16_t> in(input), out(output);
  return timed_collective(comm, kind, requested, Bytes(whole * sizeof(std::uint16_t)), [&] {
    if (kind == OpKind::AllReduce) return comm.all_reduce_sum(in, Precision::Bf16);
    comm.reduce_scatter_sum(std::span<const std::uint16_t>(in), out.first(block), Precision::Bf16);
  });
}

}  // namespace

std::vector<CollectiveRate> measure_collectives_16bit(Communicator& comm,
                                                      const std::vector<Bytes>& message_sizes) {
  std::vector<CollectiveRate> rates;
  if (comm.size() < 2) return rates;
  for (const OpKind kind : {OpKind::AllReduce, OpKind::ReduceScatter}) {
    for (const Bytes bytes : message_sizes) rates.push_back(measure_16bit(comm, kind, bytes));
  }
  return rates;
}

std::shared_ptr<float> host_float_array(std::size_t count) {
  return std::shared_ptr<float>(new float[count](), std::default_delete<float[]>());
}

double bus_bandwidth(OpKind kind, Bytes bytes, int ranks, double seconds) {
  const LinkTraffic traffic = collective_traffic(kind, bytes, GroupShape{ranks, 1});
  return double(traffic.intra_node + traffic.inter_node) / seconds;
}

std::vector<CollectiveRate> measure_collectives(Communicator& comm,
                                                const std::vector<Bytes>& message_sizes,
                                                const FloatArrayAllocator& allocate) {
  std::vector<CollectiveRate> rates;
  if (comm.size() < 2) return rates;
  for (const OpKind kind : {OpKind::AllReduce, OpKind::AllGather, OpKind::ReduceScatter}) {
    for (const Bytes bytes : message_sizes) rates.push_back(measure(comm, kind, bytes, allocate));
  }
  return rates;
}

}  // namespace zerolens::exec
