#pragma once
// The executor's collective engine behind one interface: MPI on CPU (this file's factory), NCCL on
// GPUs later. Buffers are fp32 or 16-bit element spans; sizes are per-rank element counts. Every
// call is counted (calls, message bytes as nccl-tests counts them) so measured traffic can be
// compared with the schedule's figures.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>

#include "sim/schedule/schedule.hpp"

namespace zerolens::exec {

class MemorySpace;

struct CollectiveCount {
  std::int64_t calls = 0;
  Bytes bytes = 0;  // message size: the whole buffer for all-reduce/broadcast, the gathered output for
                    // all-gather, the input for reduce-scatter (nccl-tests' convention)
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Where its buffers must be: host memory (nullptr) or a device's memory space
  // (exec/memory/memory_space.hpp; NCCL's device pointers). The collectives on Numbers
  // (exec/memory/numbers.hpp) hand it copies there of buffers elsewhere; a run places its Gpu
  // buffers in this space (MemoryLedger::place) so that no copy is needed.
  virtual MemorySpace* memory_space() const { return nullptr; }

  // In place, element-wise sum over ranks.
  virtual void all_reduce_sum(std::span<float> buffer) = 0;
  // Sum over ranks of `input` (size() x output.size() elements); rank r keeps block r.
  virtual void reduce_scatter_sum(std::span<const float> input, std::span<float> output) = 0;
  // Sum over ranks of `input`; rank r keeps the counts[r] elements after counts[0..r) (uneven
  // blocks: a gradient bucket's share of each rank's flat partition).
  virtual void reduce_scatter_sum(std::span<const float> input, std::span<const int> counts,
                                  std::span<float> output) = 0;
  // Concatenation of every rank's `input` in rank order into `output` (size() x input.size()).
  // In place when `input` is this rank's block of `output`.
  virtual void all_gather(std::span<const float> input, std::span<float> output) = 0;
  virtual void broadcast(std::span<float> buffer, int root) = 0;
  // The same on 16-bit numbers (`format` fp16 or bf16, uint16 bit patterns): 2 bytes per element on
  // the wire and in the counts. Sums add two numbers in fp32 and round to `format` at every step
  // of the reduction, as NCCL reduces half types.
  virtual void all_reduce_sum(std::span<std::uint16_t> buffer, Precision format) = 0;
  virtual void reduce_scatter_sum(std::span<const std::uint16_t> input, std::span<std::uint16_t> output,
                                  Precision format) = 0;
  virtual void reduce_scatter_sum(std::span<const std::uint16_t> input, std::span<const int> counts,
                                  std::span<std::uint16_t> output, Precision format) = 0;
  virtual void all_gather(std::span<const std::uint16_t> input, std::span<std::uint16_t> output) = 0;
  // Block j of `input` (size() equal blocks) goes to rank j, which receives it as block (this
  // rank) of its `output` (MPI_Alltoall): a MoE layer's token dispatch and combine over its
  // expert-parallel group. Counted as all_to_all, the message the whole buffer (nccl-tests'
  // size). Communicators without it (NCCL's, so far) throw.
  virtual void all_to_all(std::span<const float> /*input*/, std::span<float> /*output*/) {
    throw std::logic_error("this communicator has no all-to-all");
  }
  // Raw bytes, for ZeRO++'s quantized collectives (int8 or int4 codes with their fp32 scales):
  // all_gather_bytes concatenates every rank's `input` in rank order into `output` (in place when
  // `input` is this rank's block of it), counted as all_gather, the message the output;
  // all_to_all_bytes sends block j of `input` to rank j as MPI_Alltoall does, counted as
  // all_to_all, the message the whole buffer. Defaults: std::logic_error.
  virtual void all_gather_bytes(std::span<const std::byte> input, std::span<std::byte> output);
  virtual void all_to_all_bytes(std::span<const std::byte> input, std::span<std::byte> output);
  // Element-wise maximum over ranks of fp32 values, in place (the vocab-parallel loss's row
  // maxima), counted as an all-reduce. Default: std::logic_error (a communicator without it).
  virtual void all_reduce_max(std::span<float> buffer);
  // Point to point between pipeline stages, counted as Send and Recv (bytes: the message). A send
  // is started and returns: its buffer must stay as it is until wait_sends(); a receive returns
  // with the message. Messages between two ranks with the same `tag` arrive in the order sent.
  // Defaults: std::logic_error.
  virtual void send(std::span<const float> buffer, int peer, int tag);
  virtual void send(std::span<const std::uint16_t> buffer, int peer, int tag);
  virtual void recv(std::span<float> buffer, int peer, int tag);
  virtual void recv(std::span<std::uint16_t> buffer, int peer, int tag);
  // Waits until every send started has completed (its buffer may then be reused).
  virtual void wait_sends() {}
  // Scalars for control decisions (overflow flags, gradient norms), counted under `counted_as`.
  virtual double all_reduce_max(double value, OpKind counted_as = OpKind::AllReduce) = 0;
  virtual double all_reduce_sum(double value, OpKind counted_as = OpKind::AllReduce) = 0;
  // An fp32 scalar, as frameworks reduce the gradient norm (4 bytes on the wire).
  virtual float all_reduce_sum_float(float value, OpKind counted_as) = 0;
  // A flag OR-ed over ranks (the fp16 overflow flag): one byte on the wire, as DeepSpeed's.
  virtual bool all_reduce_flag(bool flag, OpKind counted_as) = 0;
  // The mean loss and other figures the step reports, outside the schedule: not counted.
  virtual double report_sum(double value) = 0;
  virtual void barrier() = 0;
  // A barrier whose waiting ranks sleep rather than poll, so that an idle rank takes no core from
  // ranks still working (calibrate idles ranks this way while others measure). Default: barrier().
  virtual void idle_barrier() { barrier(); }
  // Ranks 0 .. ranks-1 as a communicator of their own, the same ranks numbered alike; nullptr on
  // the other ranks, and on every rank of a communicator that cannot split. Collective.
  virtual std::unique_ptr<Communicator> first_ranks(int /*ranks*/) { return nullptr; }
  // The ranks passing the same `color` (>= 0) as a communicator of their own, numbered by `key`
  // (then by rank here); nullptr on a rank passing a negative color, and on every rank of a
  // communicator that cannot split. Collective over this communicator's ranks.
  virtual std::unique_ptr<Communicator> split(int /*color*/, int /*key*/) { return nullptr; }
  // This rank alone, as a one-rank communicator; nullptr on a communicator that cannot split.
  // Collective.
  virtual std::unique_ptr<Communicator> alone() { return nullptr; }
  // Ranks of this communicator on this rank's host (sharing its cores and memory).
  virtual int ranks_on_node() const { return size(); }

  const CollectiveCount& count(OpKind kind) const { return counts_[std::size_t(kind)]; }

 protected:
  void record(OpKind kind, Bytes bytes) {
    auto& count = counts_[std::size_t(kind)];
    ++count.calls;
    count.bytes += bytes;
  }

 private:
  std::array<CollectiveCount, kOpKindCount> counts_{};
};

// MPI_COMM_WORLD (MPI is initialised on first use and finalised at exit). A program started
// without mpirun is a single rank.
std::unique_ptr<Communicator> make_mpi_communicator();

}  // namespace zerolens::exec
