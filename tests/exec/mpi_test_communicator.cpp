// The MPI communicator, run under mpirun with 1, 2 and 4 ranks (ctest exec.mpi.np*): results
// against sums worked out in closed form, and the counted bytes against nccl-tests' convention.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "exec/comm/communicator.hpp"

namespace zerolens::exec {
namespace {

Communicator& world() {
  static const std::unique_ptr<Communicator> communicator = make_mpi_communicator();
  return *communicator;
}

// Rank r contributes r + 1 + i at element i: the sum over n ranks is n(n+1)/2 + n i.
TEST(MpiCommunicator, AllReduceSumsEveryRank) {
  Communicator& comm = world();
  const int n = comm.size();
  std::vector<float> buffer(1000);
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = float(comm.rank() + 1) + float(i);
  const auto before = comm.count(OpKind::AllReduce);
  comm.all_reduce_sum(buffer);
  for (std::size_t i = 0; i < buffer.size(); ++i) {
    ASSERT_EQ(buffer[i], float(n * (n + 1) / 2) + float(n) * float(i)) << i;
  }
  EXPECT_EQ(comm.count(OpKind::AllReduce).calls, before.calls + 1);
  EXPECT_EQ(comm.count(OpKind::AllReduce).bytes, before.bytes + 4000);
}

TEST(MpiCommunicator, ReduceScatterKeepsThisRanksBlockOfTheSum) {
  Communicator& comm = world();
  const int n = comm.size();
  const std::size_t block = 37;
  std::vector<float> input(block * std::size_t(n)), output(block);
  for (std::size_t i = 0; i < input.size(); ++i) input[i] = float(comm.rank()) * 1000 + float(i);
  comm.reduce_scatter_sum(input, output);
  const float rank_sum = float(n * (n - 1) / 2) * 1000;
  for (std::size_t j = 0; j < block; ++j) {
    const std::size_t i = std::size_t(comm.rank()) * block + j;
    ASSERT_EQ(output[j], rank_sum + float(n) * float(i)) << j;
  }
  EXPECT_EQ(comm.count(OpKind::ReduceScatter).bytes, Bytes(input.size() * 4));
}

TEST(MpiCommunicator, AllGatherConcatenatesInRankOrderAndBroadcastCopiesTheRoot) {
  Communicator& comm = world();
  const int n = comm.size();
  std::vector<float> input(5, float(comm.rank())), output(5 * std::size_t(n));
  comm.all_gather(input, output);
  for (std::size_t i = 0; i < output.size(); ++i) ASSERT_EQ(output[i], float(i / 5)) << i;
  EXPECT_EQ(comm.count(OpKind::AllGather).bytes, Bytes(output.size() * 4));
  std::vector<float> buffer(3, float(comm.rank() + 10));
  comm.broadcast(buffer, n - 1);
  for (const float value : buffer) EXPECT_EQ(value, float(n - 1 + 10));
  EXPECT_THROW(comm.all_gather(input, std::span<float>(output.data(), output.size() - 1)), std::invalid_argument);
}

// Uneven blocks: rank r keeps r + 1 elements.
TEST(MpiCommunicator, ReduceScatterWithCountsKeepsUnevenBlocks) {
  Communicator& comm = world();
  const int n = comm.size();
  std::vector<int> counts;
  for (int r = 0; r < n; ++r) counts.push_back(r + 1);
  std::vector<float> input(std::size_t(n * (n + 1) / 2));
  std::iota(input.begin(), input.end(), 0.0f);
  std::vector<float> output(std::size_t(comm.rank() + 1));
  comm.reduce_scatter_sum(input, counts, output);
  const std::size_t first = std::size_t(comm.rank() * (comm.rank() + 1) / 2);
  for (std::size_t j = 0; j < output.size(); ++j) ASSERT_EQ(output[j], float(n) * float(first + j)) << j;
  std::vector<float> wrong(output.size() + 1);
  EXPECT_THROW(comm.reduce_scatter_sum(input, counts, wrong), std::invalid_argument);
}

// Groups for calibrate: the first k ranks as a communicator of their own (the others get none),
// each rank alone, the ranks on this host (mpirun starts them all here), and a barrier the
// waiting ranks sleep through.
TEST(MpiCommunicator, FirstRanksAloneAndTheNode) {
  Communicator& comm = world();
  const int n = comm.size();
  EXPECT_EQ(comm.ranks_on_node(), n);
  for (int k = 1; k <= n; ++k) {
    const std::unique_ptr<Communicator> group = comm.first_ranks(k);
    ASSERT_EQ(group != nullptr, comm.rank() < k) << k;
    if (group) {
      EXPECT_EQ(group->size(), k);
      EXPECT_EQ(group->rank(), comm.rank());
      std::vector<float> one(1, 1.0f);
      group->all_reduce_sum(one);
      EXPECT_EQ(one[0], float(k));
    }
    comm.idle_barrier();
  }
  const std::unique_ptr<Communicator> alone = comm.alone();
  ASSERT_NE(alone, nullptr);
  EXPECT_EQ(alone->size(), 1);
  EXPECT_EQ(alone->rank(), 0);
  EXPECT_DOUBLE_EQ(alone->report_sum(2.5), 2.5);
}

TEST(MpiCommunicator, ScalarReductions) {
  Communicator& comm = world();
  const int n = comm.size();
  EXPECT_EQ(comm.all_reduce_max(double(comm.rank())), double(n - 1));
  const auto norms = comm.count(OpKind::GradNorm).calls;
  EXPECT_EQ(comm.all_reduce_sum(1.5, OpKind::GradNorm), 1.5 * n);
  EXPECT_EQ(comm.count(OpKind::GradNorm).calls, norms + 1);
  const auto reduces = comm.count(OpKind::AllReduce).calls;
  EXPECT_EQ(comm.report_sum(2.0), 2.0 * n);
  EXPECT_EQ(comm.count(OpKind::AllReduce).calls, reduces);  // reporting is not part of the step
  comm.barrier();
}

}  // namespace
}  // namespace zerolens::exec
