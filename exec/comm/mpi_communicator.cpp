// The MPI communicator: each collective is one nonblocking MPI call on MPI_COMM_WORLD (or a group
// of its first ranks, first_ranks()), waited for by polling: the wait notices SIGINT/SIGTERM
// (exec/comm/interrupt.hpp) and a collective that makes no progress for the watchdog's timeout.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "exec/comm/communicator.hpp"
#include "exec/comm/interrupt.hpp"
#include "kernels/precision.hpp"

namespace zerolens::exec {
namespace {

void check(int status, const char* call) {
  if (status == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, message, &length);
  throw std::runtime_error(std::string(call) +
                           " failed: " + std::string(message, std::size_t(length)));
}

// MPI counts are int: larger buffers would need MPI-4's large-count calls.
int mpi_count(std::size_t elements) {
  if (elements > std::size_t(2147483647)) throw std::length_error("MPI message over 2^31 elements");
  return int(elements);
}

Bytes float_bytes(std::size_t elements) {
  return Bytes(elements * sizeof(float));
}

// MPI has no fp16/bf16 sum: user-defined ops add two 16-bit numbers in fp32 and round back, as
// NCCL's half-type reductions do at every step, so the wire carries 2-byte elements.
template <float (*Widen)(std::uint16_t), std::uint16_t (*Narrow)(float)>
void sum_16bit(void* in, void* inout, int* length, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *length; ++i) b[i] = Narrow(Widen(a[i]) + Widen(b[i]));
}

Bytes half_bytes(std::size_t elements) {
  return Bytes(elements * sizeof(std::uint16_t));
}

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      std::atexit(finalize_mpi);
    }
    init();
    const int cores = std::max(1, int(std::thread::hardware_concurrency()));
    yield_seconds_ = ranks_on_node_ > cores ? kSharedCoreYieldSeconds : kYieldSeconds;
  }
  // A group split off MPI_COMM_WORLD, owned (freed with the communicator); it waits as the world's
  // ranks do (they decide whether the cores are shared).
  MpiCommunicator(MPI_Comm group, double yield_seconds)
      : comm_(group), owned_(true), yield_seconds_(yield_seconds) {
    init();
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  void init() {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm node = MPI_COMM_NULL;
    check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
          "MPI_Comm_split_type");
    MPI_Comm_size(node, &ranks_on_node_);
    MPI_Comm_free(&node);
    // Commutative; freed by MPI_Finalize.
    check(MPI_Op_create(&sum_16bit<kernels::fp16_to_fp32, kernels::fp32_to_fp16>, 1, &sum_fp16_),
          "MPI_Op_create");
    check(MPI_Op_create(&sum_16bit<kernels::bf16_to_fp32, kernels::fp32_to_bf16>, 1, &sum_bf16_),
          "MPI_Op_create");
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(std::span<float> buffer) override {
    collective(MPI_Iallreduce(MPI_IN_PLACE, buffer.data(), mpi_count(buffer.size()), MPI_FLOAT,
                              MPI_SUM, comm_, &request_),
               "MPI_Iallreduce", float_bytes(buffer.size()));
    record(OpKind::AllReduce, float_bytes(buffer.size()));
  }

  void reduce_scatter_sum(std::span<const float> input, std::span<float> output) override {
    require_blocks(input.size(), output.size(), "reduce_scatter_sum");
    collective(MPI_Ireduce_scatter_block(input.data(), output.data(), mpi_count(output.size()),
                                         MPI_FLOAT, MPI_SUM, comm_, &request_),
               "MPI_Ireduce_scatter_block", float_bytes(input.size()));
    record(OpKind::ReduceScatter, float_bytes(input.size()));
  }

  void reduce_scatter_sum(std::span<const float> input, std::span<const int> counts,
                          std::span<float> output) override {
    require_counts(input.size(), counts, output.size());
    collective(MPI_Ireduce_scatter(input.data(), output.data(), counts.data(), MPI_FLOAT, MPI_SUM,
                                   comm_, &request_),
               "MPI_Ireduce_scatter", float_bytes(input.size()));
    record(OpKind::ReduceScatter, float_bytes(input.size()));
  }

  // In place (NCCL's convention): the input is this rank's block of the output already.
  template <typename T>
  const void* send_buffer(std::span<const T> input, std::span<T> output) const {
    const bool in_place = input.data() == output.data() + std::size_t(rank()) * input.size();
    return in_place ? MPI_IN_PLACE : static_cast<const void*>(input.data());
  }

  void all_gather(std::span<const float> input, std::span<float> output) override {
    require_blocks(output.size(), input.size(), "all_gather");
    collective(MPI_Iallgather(send_buffer(input, output), mpi_count(input.size()), MPI_FLOAT,
                              output.data(), mpi_count(input.size()), MPI_FLOAT, comm_, &request_),
               "MPI_Iallgather", float_bytes(output.size()));
    record(OpKind::AllGather, float_bytes(output.size()));
  }

  void all_reduce_max(std::span<float> buffer) override {
    collective(MPI_Iallreduce(MPI_IN_PLACE, buffer.data(), mpi_count(buffer.size()), MPI_FLOAT,
                              MPI_MAX, comm_, &request_),
               "MPI_Iallreduce", float_bytes(buffer.size()));
    record(OpKind::AllReduce, float_bytes(buffer.size()));
  }

  void send(std::span<const float> buffer, int peer, int tag) override {
    start_send(buffer.data(), buffer.size(), MPI_FLOAT, peer, tag, float_bytes(buffer.size()));
  }
  void send(std::span<const std::uint16_t> buffer, int peer, int tag) override {
    start_send(buffer.data(), buffer.size(), MPI_UINT16_T, peer, tag, half_bytes(buffer.size()));
  }
  void recv(std::span<float> buffer, int peer, int tag) override {
    receive(buffer.data(), buffer.size(), MPI_FLOAT, peer, tag, float_bytes(buffer.size()));
  }
  void recv(std::span<std::uint16_t> buffer, int peer, int tag) override {
    receive(buffer.data(), buffer.size(), MPI_UINT16_T, peer, tag, half_bytes(buffer.size()));
  }
  void wait_sends() override {
    for (MPI_Request& request : sends_) {
      request_ = request;
      collective(MPI_SUCCESS, "MPI_Isend", 0);
      request = MPI_REQUEST_NULL;
    }
    sends_.clear();
  }

  void broadcast(std::span<float> buffer, int root) override {
    collective(
        MPI_Ibcast(buffer.data(), mpi_count(buffer.size()), MPI_FLOAT, root, comm_, &request_),
        "MPI_Ibcast", float_bytes(buffer.size()));
    record(OpKind::Broadcast, float_bytes(buffer.size()));
  }

  void all_reduce_sum(std::span<std::uint16_t> buffer, Precision format) override {
    collective(MPI_Iallreduce(MPI_IN_PLACE, buffer.data(), mpi_count(buffer.size()), MPI_UINT16_T,
                              sum_op(format), comm_, &request_),
               "MPI_Iallreduce", half_bytes(buffer.size()));
    record(OpKind::AllReduce, half_bytes(buffer.size()));
  }

  void reduce_scatter_sum(std::span<const std::uint16_t> input, std::span<std::uint16_t> output,
                          Precision format) override {
    require_blocks(input.size(), output.size(), "reduce_scatter_sum");
    collective(MPI_Ireduce_scatter_block(input.data(), output.data(), mpi_count(output.size()),
                                         MPI_UINT16_T, sum_op(format), comm_, &request_),
               "MPI_Ireduce_scatter_block", half_bytes(input.size()));
    record(OpKind::ReduceScatter, half_bytes(input.size()));
  }

  void reduce_scatter_sum(std::span<const std::uint16_t> input, std::span<const int> counts,
                          std::span<std::uint16_t> output, Precision format) override {
    require_counts(input.size(), counts, output.size());
    collective(MPI_Ireduce_scatter(input.data(), output.data(), counts.data(), MPI_UINT16_T,
                                   sum_op(format), comm_, &request_),
               "MPI_Ireduce_scatter", half_bytes(input.size()));
    record(OpKind::ReduceScatter, half_bytes(input.size()));
  }

  void all_gather(std::span<const std::uint16_t> input, std::span<std::uint16_t> output) override {
    require_blocks(output.size(), input.size(), "all_gather");
    collective(
        MPI_Iallgather(send_buffer(input, output), mpi_count(input.size()), MPI_UINT16_T,
                       output.data(), mpi_count(input.size()), MPI_UINT16_T, comm_, &request_),
        "MPI_Iallgather", half_bytes(output.size()));
    record(OpKind::AllGather, half_bytes(output.size()));
  }

  void all_to_all(std::span<const float> input, std::span<float> output) override {
    if (input.size() != output.size() || input.size() % std::size_t(size_) != 0)
      throw std::invalid_argument("all_to_all: input and output of ranks x the block");
    const int block = mpi_count(input.size() / std::size_t(size_));
    collective(MPI_Ialltoall(input.data(), block, MPI_FLOAT, output.data(), block, MPI_FLOAT, comm_,
                             &request_),
               "MPI_Ialltoall", float_bytes(input.size()));
    record(OpKind::AllToAll, float_bytes(input.size()));
  }

  void all_gather_bytes(std::span<const std::byte> input, std::span<std::byte> output) override {
    require_blocks(output.size(), input.size(), "all_gather_bytes");
    collective(MPI_Iallgather(send_buffer(input, output), mpi_count(input.size()), MPI_BYTE,
                              output.data(), mpi_count(input.size()), MPI_BYTE, comm_, &request_),
               "MPI_Iallgather", Bytes(output.size()));
    record(OpKind::AllGather, Bytes(output.size()));
  }

  void all_to_all_bytes(std::span<const std::byte> input, std::span<std::byte> output) override {
    if (input.size() != output.size() || input.size() % std::size_t(size_) != 0)
      throw std::invalid_argument("all_to_all_bytes: input and output of ranks x the block");
    const int block = mpi_count(input.size() / std::size_t(size_));
    collective(MPI_Ialltoall(input.data(), block, MPI_BYTE, output.data(), block, MPI_BYTE, comm_,
                             &request_),
               "MPI_Ialltoall", Bytes(input.size()));
    record(OpKind::AllToAll, Bytes(input.size()));
  }

  bool all_reduce_flag(bool flag, OpKind counted_as) override {
    std::uint8_t value = flag ? 1 : 0, result = 0;
    collective(MPI_Iallreduce(&value, &result, 1, MPI_UINT8_T, MPI_MAX, comm_, &request_),
               "MPI_Iallreduce", Bytes(1));
    record(counted_as, Bytes(1));
    return result != 0;
  }

  double all_reduce_max(double value, OpKind counted_as) override {
    record(counted_as, Bytes(sizeof(double)));
    return scalar(value, MPI_MAX);
  }
  double all_reduce_sum(double value, OpKind counted_as) override {
    record(counted_as, Bytes(sizeof(double)));
    return scalar(value, MPI_SUM);
  }
  float all_reduce_sum_float(float value, OpKind counted_as) override {
    float result = 0;
    collective(MPI_Iallreduce(&value, &result, 1, MPI_FLOAT, MPI_SUM, comm_, &request_),
               "MPI_Iallreduce", Bytes(sizeof(float)));
    record(counted_as, Bytes(sizeof(float)));
    return result;
  }
  double report_sum(double value) override { return scalar(value, MPI_SUM); }
  void barrier() override { collective(MPI_Ibarrier(comm_, &request_), "MPI_Ibarrier", 0); }
  void idle_barrier() override {
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
    for (int done = 0;;) {
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) return;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  std::unique_ptr<Communicator> first_ranks(int ranks) override {
    MPI_Comm group = MPI_COMM_NULL;
    const bool member = rank_ < ranks;
    check(MPI_Comm_split(comm_, member ? 0 : MPI_UNDEFINED, rank_, &group), "MPI_Comm_split");
    if (!member) return nullptr;
    return std::make_unique<MpiCommunicator>(group, yield_seconds_);
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm group = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color >= 0 ? color : MPI_UNDEFINED, key, &group), "MPI_Comm_split");
    if (color < 0) return nullptr;
    return std::make_unique<MpiCommunicator>(group, yield_seconds_);
  }
  std::unique_ptr<Communicator> alone() override {
    MPI_Comm group = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, rank_, 0, &group), "MPI_Comm_split");
    return std::make_unique<MpiCommunicator>(group, yield_seconds_);
  }
  int ranks_on_node() const override { return ranks_on_node_; }

 private:
  void require_blocks(std::size_t whole, std::size_t block, const char* call) const {
    if (whole != block * std::size_t(size_)) {
      throw std::invalid_argument(std::string(call) +
                                  ": the whole buffer must be ranks x the block");
    }
  }

  void require_counts(std::size_t input, std::span<const int> counts, std::size_t output) const {
    if (counts.size() != std::size_t(size_))
      throw std::invalid_argument("reduce_scatter_sum: one count per rank");
    std::size_t total = 0;
    for (const int count : counts) total += std::size_t(count);
    if (total != input || output != std::size_t(counts[std::size_t(rank_)])) {
      throw std::invalid_argument(
          "reduce_scatter_sum: counts must sum to the input, this rank's count to the output");
    }
  }

  // A send runs while the caller goes on (Megatron's pipeline posts its sends and receives
  // together): two stages sending to each other at once cannot wait on each other.
  void start_send(const void* data, std::size_t count, MPI_Datatype type, int peer, int tag,
                  Bytes bytes) {
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Isend(data, mpi_count(count), type, peer, tag, comm_, &request), "MPI_Isend");
    sends_.push_back(request);
    record(OpKind::Send, bytes);
  }
  void receive(void* data, std::size_t count, MPI_Datatype type, int peer, int tag, Bytes bytes) {
    collective(MPI_Irecv(data, mpi_count(count), type, peer, tag, comm_, &request_), "MPI_Irecv",
               bytes);
    record(OpKind::Recv, bytes);
  }

  MPI_Op sum_op(Precision format) const {
    if (format == Precision::Fp32)
      throw std::invalid_argument("16-bit collective with fp32 format");
    return format == Precision::Fp16 ? sum_fp16_ : sum_bf16_;
  }

  double scalar(double value, MPI_Op op) {
    double result = 0;
    collective(MPI_Iallreduce(&value, &result, 1, MPI_DOUBLE, op, comm_, &request_),
               "MPI_Iallreduce", Bytes(sizeof(double)));
    return result;
  }

  // Waits for request_, the collective `call` just started (`bytes` its message): polls, spinning
  // for a moment, then yielding its core for the length of a step's skew, then sleeping with a
  // short back-off (a rank that waits long for a slower one takes no core from it); throws
  // Interrupted on SIGINT/SIGTERM; aborts the job when the collective has not completed after the
  // watchdog's timeout (a peer stopped or died).
  void collective(int status, const char* call, Bytes bytes) {
    check(status, call);
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    const double timeout = collective_timeout();
    auto pause = std::chrono::microseconds(0);
    for (int polls = 0;; ++polls) {
      int done = 0;
      check(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) return;
      throw_if_interrupted();
      if (polls < kSpinPolls) continue;
      const double waited = std::chrono::duration<double>(Clock::now() - start).count();
      if (timeout > 0 && waited > timeout) stuck(call, bytes, waited);
      if (waited < yield_seconds_) {
        std::this_thread::yield();  // the core goes to a rank that shares it, if any
        continue;
      }
      pause = std::min(kMaxPause, std::max(kMinPause, pause * 2));
      std::this_thread::sleep_for(pause);
    }
  }

  [[noreturn]] void stuck(const char* call, Bytes bytes, double waited) const {
    const std::int64_t step = current_step();
    const std::string at = step >= 0 ? ", step " + std::to_string(step + 1) : std::string();
    std::fprintf(
        stderr,
        "zerolens run: rank %d: %s (%lld bytes%s) made no progress for %.0f s; a peer is stuck or "
        "dead; aborting (--collective-timeout)\n",
        rank_, call, static_cast<long long>(bytes), at.c_str(), waited);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, kStuckExitCode);
    std::_Exit(kStuckExitCode);
  }

  static constexpr int kSpinPolls = 2000;  // about the latency of a small collective, spun
  // Open MPI advances a nonblocking collective only inside MPI_Test: a rank asleep when its late
  // peer arrives holds up every round (a 249 KB all-reduce on 2 ranks: 0.08 ms in step, 0.98 ms
  // after a 2 ms skew with 50 us pauses, 15 ms with 2 ms pauses; 0.085 ms yielding;
  // docs/executor.md). So a waiting rank yields for kYieldSeconds, the skew of a step, and a longer
  // wait (a peer on NVMe, or stuck) sleeps, in pauses near a round's latency. Where the node's
  // ranks share its cores, a yielding rank still holds its share of one, which the ranks still
  // computing need: there it yields only for kSharedCoreYieldSeconds, the usual skew (4 ranks on 2
  // cores, NVMe offload: 40.5 ms a step yielding up to 50 ms, 35.1 ms up to 2 ms; but 2 ranks on 2
  // cores sleeping after 2 ms took 10.5-13.7 ms a step against 9.5-10.7 yielding).
  static constexpr double kYieldSeconds = 0.05;
  static constexpr double kSharedCoreYieldSeconds = 0.002;
  static constexpr std::chrono::microseconds kMinPause{20}, kMaxPause{50};
  static constexpr int kStuckExitCode = 3;

  MPI_Request request_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> sends_;  // started by send(), completed by wait_sends()
  MPI_Comm comm_ = MPI_COMM_WORLD;
  bool owned_ = false;
  int rank_ = 0;
  int size_ = 1;
  int ranks_on_node_ = 1;
  double yield_seconds_ = kYieldSeconds;
  MPI_Op sum_fp16_ = MPI_OP_NULL, sum_bf16_ = MPI_OP_NULL;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() {
  return std::make_unique<MpiCommunicator>();
}

}  // namespace zerolens::exec
