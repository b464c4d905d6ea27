// The GPU communicators under mpirun (ctest exec.cuda.mpi.np*): the factory's answer without a
// device, and with one, each collective against the MPI communicator on the same data (exact for
// copies and for sums of small integers, within rounding for random sums), the same counts, and the
// host-staged fallback (forced, or chosen because ranks share a GPU).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_exec_test_support.hpp"
#include "exec/cuda/cuda_memory.hpp"
#include "exec/cuda/nccl_communicator.hpp"
#include "kernels/precision.hpp"

namespace zerolens::exec {
namespace {

Communicator& mpi() {
  static const std::unique_ptr<Communicator> communicator = make_mpi_communicator();
  return *communicator;
}

TEST(GpuCommunicatorFactory, ReportsWhatItChoseOrThatThereIsNoDevice) {
  mpi();  // MPI up first, as in the executor
  if (testing::cuda_devices().count == 0) {
    try {
      make_gpu_communicator();
      FAIL() << "a GPU communicator without a CUDA device";
    } catch (const NoCudaDevice& error) {
      EXPECT_EQ(std::string(error.what()).rfind("no CUDA device on rank " + std::to_string(mpi().rank()) + ": ", 0), 0u)
          << error.what();
    }
    mpi().barrier();  // every rank threw and none hangs in a collective
    return;
  }
  const auto communicator = make_gpu_communicator();
  const std::string backend = communicator->backend_name();
  EXPECT_TRUE(backend == "nccl" || backend == "mpi-staged") << backend;
  EXPECT_FALSE(communicator->backend_reason().empty());
  if (mpi().size() > testing::cuda_devices().count) {  // one node here: some ranks must share a GPU
    EXPECT_EQ(backend, "mpi-staged") << communicator->backend_reason();
    EXPECT_NE(communicator->backend_reason().find("share GPU"), std::string::npos) << communicator->backend_reason();
  }
  const auto staged = make_gpu_communicator({.force_staged = true});
  EXPECT_STREQ(staged->backend_name(), "mpi-staged");
}

// Parameterised on forcing the staged fallback: false runs whatever the factory picks.
class GpuCommunicatorTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    REQUIRE_CUDA_DEVICE();
    gpu_ = make_gpu_communicator({.force_staged = GetParam()});
  }
  void TearDown() override {
    if (!IsSkipped()) {
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "an asynchronous CUDA error";
    }
  }

  template <typename T>
  DeviceBuffer<T> to_device(const std::vector<T>& host) {
    DeviceBuffer<T> buffer(ledger_, Component::ReduceBucket, host.size());
    buffer.copy_from_host(host);
    return buffer;
  }
  template <typename T>
  std::vector<T> to_host(const DeviceBuffer<T>& buffer) {
    std::vector<T> host(buffer.size());
    buffer.copy_to_host(host);
    return host;
  }
  // The device communicator's count of `kind` grew by as much as the MPI one's over the same calls.
  void expect_same_counts(OpKind kind, const CollectiveCount& gpu_before, const CollectiveCount& mpi_before) {
    const CollectiveCount& gpu_now = gpu_->count(kind);
    const CollectiveCount& mpi_now = mpi().count(kind);
    EXPECT_EQ(gpu_now.calls - gpu_before.calls, mpi_now.calls - mpi_before.calls) << to_string(kind);
    EXPECT_EQ(gpu_now.bytes - gpu_before.bytes, mpi_now.bytes - mpi_before.bytes) << to_string(kind);
  }

  int rank() const { return gpu_->rank(); }
  int ranks() const { return gpu_->size(); }
  MemoryLedger ledger_;
  std::unique_ptr<DeviceCommunicator> gpu_;
};

std::array<CollectiveCount, kOpKindCount> all_counts(const Communicator& communicator) {
  std::array<CollectiveCount, kOpKindCount> counts{};
  for (int k = 0; k < kOpKindCount; ++k) counts[std::size_t(k)] = communicator.count(OpKind(k));
  return counts;
}

// Small integers: every summation order gives the same fp32 (and bf16/fp16) result.
std::vector<float> small_integers(std::size_t count, int rank) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = float(rank + 1) + float(i % 50);
  return values;
}

TEST_P(GpuCommunicatorTest, Fp32CollectivesMatchMpi) {
  const std::size_t block = 1001;
  const auto whole = small_integers(block * std::size_t(ranks()), rank());
  const auto gpu_before = all_counts(*gpu_);
  const auto mpi_before = all_counts(mpi());

  auto reduced = to_device(whole);
  gpu_->all_reduce_sum(reduced.span());
  auto expected = whole;
  mpi().all_reduce_sum(expected);
  EXPECT_EQ(to_host(reduced), expected);

  auto scattered = to_device(std::vector<float>(block));
  const auto input = to_device(whole);
  gpu_->reduce_scatter_sum(std::span<const float>(input.span()), scattered.span());
  std::vector<float> expected_block(block);
  mpi().reduce_scatter_sum(whole, expected_block);
  EXPECT_EQ(to_host(scattered), expected_block);

  std::vector<int> counts;  // rank r keeps r + 1 elements of the first few
  for (int r = 0; r < ranks(); ++r) counts.push_back(r + 1);
  const std::size_t uneven_total = std::size_t(ranks() * (ranks() + 1) / 2);
  const std::vector<float> uneven_input(whole.begin(), whole.begin() + std::ptrdiff_t(uneven_total));
  const auto uneven = to_device(uneven_input);
  auto uneven_out = to_device(std::vector<float>(std::size_t(rank() + 1)));
  gpu_->reduce_scatter_sum(std::span<const float>(uneven.span()), counts, uneven_out.span());
  std::vector<float> expected_uneven(std::size_t(rank() + 1));
  mpi().reduce_scatter_sum(uneven_input, counts, expected_uneven);
  EXPECT_EQ(to_host(uneven_out), expected_uneven);

  // All-gather in place (this rank's block of the output) and out of place; broadcast from the last rank.
  const std::vector<float> mine(block, float(rank()) + 0.25f);
  auto gathered = to_device(std::vector<float>(whole.size()));
  const auto mine_device = to_device(mine);
  gpu_->all_gather(std::span<const float>(mine_device.span()), gathered.span());
  std::vector<float> expected_gathered(whole.size());
  mpi().all_gather(mine, expected_gathered);
  EXPECT_EQ(to_host(gathered), expected_gathered);
  std::vector<float> in_place_host(whole.size());
  std::copy(mine.begin(), mine.end(), in_place_host.begin() + std::ptrdiff_t(std::size_t(rank()) * block));
  auto in_place = to_device(in_place_host);
  gpu_->all_gather(std::span<const float>(in_place.data() + std::size_t(rank()) * block, block), in_place.span());
  EXPECT_EQ(to_host(in_place), expected_gathered);
  mpi().all_gather(mine, expected_gathered);  // the same call count on both sides

  auto broadcast = to_device(mine);
  gpu_->broadcast(broadcast.span(), ranks() - 1);
  auto expected_broadcast = mine;
  mpi().broadcast(expected_broadcast, ranks() - 1);
  EXPECT_EQ(to_host(broadcast), expected_broadcast);

  for (const OpKind kind : {OpKind::AllReduce, OpKind::ReduceScatter, OpKind::AllGather, OpKind::Broadcast}) {
    expect_same_counts(kind, gpu_before[std::size_t(kind)], mpi_before[std::size_t(kind)]);
  }
  EXPECT_THROW(gpu_->all_gather(std::span<const float>(mine_device.span()), std::span<float>(gathered.data(), 3)),
               std::invalid_argument);
}

TEST_P(GpuCommunicatorTest, RandomFp32SumsAgreeWithinRounding) {
  std::mt19937 random(unsigned(1234 + rank()));
  std::normal_distribution<float> normal;
  std::vector<float> values(4096);
  for (float& value : values) value = normal(random);
  auto device = to_device(values);
  gpu_->all_reduce_sum(device.span());
  mpi().all_reduce_sum(values);
  const auto result = to_host(device);
  for (std::size_t i = 0; i < values.size(); ++i) {
    ASSERT_NEAR(result[i], values[i], 1e-6f * float(ranks()) * (1.0f + std::fabs(values[i]))) << i;
  }
}

TEST_P(GpuCommunicatorTest, SixteenBitCollectivesMatchMpi) {
  for (const Precision format : {Precision::Bf16, Precision::Fp16}) {
    const auto narrow = format == Precision::Bf16 ? kernels::fp32_to_bf16 : kernels::fp32_to_fp16;
    const std::size_t block = 515;
    std::vector<std::uint16_t> whole;
    for (const float value : small_integers(block * std::size_t(ranks()), rank())) whole.push_back(narrow(value));
    const auto gpu_before = gpu_->count(OpKind::ReduceScatter);
    const auto mpi_before = mpi().count(OpKind::ReduceScatter);

    auto reduced = to_device(whole);
    gpu_->all_reduce_sum(reduced.span(), format);
    auto expected = whole;
    mpi().all_reduce_sum(expected, format);
    EXPECT_EQ(to_host(reduced), expected) << to_string(format);

    const auto input = to_device(whole);
    auto scattered = to_device(std::vector<std::uint16_t>(block));
    gpu_->reduce_scatter_sum(std::span<const std::uint16_t>(input.span()), scattered.span(), format);
    std::vector<std::uint16_t> expected_block(block);
    mpi().reduce_scatter_sum(whole, expected_block, format);
    EXPECT_EQ(to_host(scattered), expected_block) << to_string(format);

    std::vector<int> counts(static_cast<std::size_t>(ranks()), int(block));
    counts.back() += 1;  // uneven: the last rank keeps one more
    auto uneven_input = whole;
    uneven_input.push_back(narrow(1.0f));
    const auto uneven = to_device(uneven_input);
    auto uneven_out = to_device(std::vector<std::uint16_t>(std::size_t(counts[std::size_t(rank())])));
    gpu_->reduce_scatter_sum(std::span<const std::uint16_t>(uneven.span()), counts, uneven_out.span(), format);
    std::vector<std::uint16_t> expected_uneven(uneven_out.size());
    mpi().reduce_scatter_sum(uneven_input, counts, expected_uneven, format);
    EXPECT_EQ(to_host(uneven_out), expected_uneven) << to_string(format);
    EXPECT_EQ(gpu_->count(OpKind::ReduceScatter).bytes - gpu_before.bytes,
              mpi().count(OpKind::ReduceScatter).bytes - mpi_before.bytes);

    const std::vector<std::uint16_t> mine(block, narrow(float(rank()) + 0.5f));
    const auto mine_device = to_device(mine);
    auto gathered = to_device(std::vector<std::uint16_t>(whole.size()));
    gpu_->all_gather(std::span<const std::uint16_t>(mine_device.span()), gathered.span());
    std::vector<std::uint16_t> expected_gathered(whole.size());
    mpi().all_gather(mine, expected_gathered);
    EXPECT_EQ(to_host(gathered), expected_gathered) << to_string(format);
  }
  EXPECT_THROW(gpu_->all_reduce_sum(std::span<std::uint16_t>(), Precision::Fp32), std::invalid_argument);
}

TEST_P(GpuCommunicatorTest, ScalarsGoThroughMpiAndAreCountedAsMpiCountsThem) {
  const auto flags = gpu_->count(OpKind::OverflowCheck);
  EXPECT_EQ(gpu_->all_reduce_flag(rank() == ranks() - 1, OpKind::OverflowCheck), true);
  EXPECT_EQ(gpu_->count(OpKind::OverflowCheck).calls, flags.calls + 1);
  EXPECT_EQ(gpu_->count(OpKind::OverflowCheck).bytes, flags.bytes + 1);
  const auto norms = gpu_->count(OpKind::GradNorm);
  EXPECT_EQ(gpu_->all_reduce_sum(1.5, OpKind::GradNorm), 1.5 * ranks());
  EXPECT_EQ(gpu_->all_reduce_sum_float(2.0f, OpKind::GradNorm), 2.0f * float(ranks()));
  EXPECT_EQ(gpu_->count(OpKind::GradNorm).bytes, norms.bytes + 8 + 4);
  EXPECT_EQ(gpu_->all_reduce_max(double(rank())), double(ranks() - 1));
  const auto reduces = gpu_->count(OpKind::AllReduce);
  EXPECT_EQ(gpu_->report_sum(2.0), 2.0 * ranks());
  EXPECT_EQ(gpu_->count(OpKind::AllReduce).calls, reduces.calls + 0);  // reporting is not counted
  gpu_->barrier();
}

// A collective ordered after a kernel-free producer stream: a copy enqueued there, then wait_for.
TEST_P(GpuCommunicatorTest, WaitForOrdersTheCollectiveAfterTheProducer) {
  cudaStream_t producer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  const std::vector<float> values(1 << 20, 1.0f);
  PinnedHostBuffer<float> pinned(ledger_, Component::OffloadStaging, values.size());
  std::copy(values.begin(), values.end(), pinned.data());
  DeviceBuffer<float> buffer(ledger_, Component::ReduceBucket, values.size());
  ASSERT_EQ(cudaMemcpyAsync(buffer.data(), pinned.data(), buffer.size() * sizeof(float), cudaMemcpyHostToDevice,
                            producer),
            cudaSuccess);
  gpu_->wait_for(producer);
  gpu_->all_reduce_sum(buffer.span());
  EXPECT_EQ(to_host(buffer), std::vector<float>(values.size(), float(ranks())));
  cudaStreamSynchronize(producer);
  cudaStreamDestroy(producer);
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuCommunicatorTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& backend) {
                           return backend.param ? std::string("ForcedStaged") : std::string("Chosen");
                         });

}  // namespace
}  // namespace zerolens::exec
