// `zerolens calibrate` across the ranks of mpirun (ctest exec.mpi.np1/2/4): every rank measures,
// every rank ends with the same figures, collectives are measured with nccl-tests' sizes and
// factors, and each rank's NVMe object is written, read back and removed.
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "exec/calibrate/calibrate.hpp"
#include "exec/run/calibrate_executor.hpp"
#include "sim/schedule/comm.hpp"

namespace zerolens::exec {
namespace {

Communicator& world() {
  static const std::unique_ptr<Communicator> communicator = make_mpi_communicator();
  return *communicator;
}

TEST(MpiCalibrate, EveryRankMeasuresAndAgrees) {
  namespace fs = std::filesystem;
  Communicator& comm = world();
  const int n = comm.size();
  // mpirun is the parent of every rank on this node: its pid names a directory they share.
  const fs::path dir =
      fs::temp_directory_path() / ("zerolens-mpi-calibrate-" + std::to_string(::getppid()));
  if (comm.rank() == 0) fs::create_directories(dir);
  comm.barrier();
  CalibrateOptions options = quick_calibrate_options();
  options.gemm_sizes = {32};
  options.stream_elements = 1 << 16;
  options.adam_parameters = 1 << 16;
  options.message_sizes = {4096, 12345};  // 12345: rounded down to whole floats per rank
  options.nvme_path = dir.string();
  options.nvme_bytes = 256 * 1024 + 3;  // not a whole number of 4096-byte blocks
  options.repeats = 2;
  options.layer_shapes = {{32, 2, 64, 16, 2}, {48, 3, 96, 32, 2}, {64, 4, 128, 16, 4}};
  options.layer_seconds = 0.2;
  options.engine_shape = {32, 2, 64, 16, 2};
  options.engine_seconds = 0.2;
  const Calibration c = calibrate(comm, options, nullptr, measure_cpu_backend);
  EXPECT_EQ(c.ranks, n);
  ASSERT_EQ(c.gemm.size(), 1u);
  EXPECT_NEAR(c.gemm[0].flops_per_second * c.gemm[0].seconds, 2.0 * 32 * 32 * 32,
              1e-6);  // 2 n^3 per call
  EXPECT_NEAR(c.adam_bytes_per_second, 28 * c.adam_parameters_per_second,
              1e-9 * c.adam_bytes_per_second);
  ASSERT_TRUE(c.nvme.has_value());
  EXPECT_EQ(c.nvme->bytes_per_rank, 256 * 1024 + 3);
  // Same figures on every rank: the sum over ranks is n times this rank's.
  EXPECT_DOUBLE_EQ(comm.report_sum(c.triad_bytes_per_second), n * c.triad_bytes_per_second);
  EXPECT_DOUBLE_EQ(comm.report_sum(c.nvme->write_bytes_per_second),
                   n * c.nvme->write_bytes_per_second);
  EXPECT_GT(c.nvme->overwrite_bytes_per_second, 0);
  ASSERT_EQ(c.collectives.size(), n == 1 ? 0u : 6u);  // 3 collectives x 2 sizes
  for (const auto& rate : c.collectives) {
    EXPECT_EQ(rate.bytes % (rate.kind == OpKind::AllReduce ? 4 : 4 * n), 0) << to_string(rate.kind);
    EXPECT_LE(rate.bytes, 12345);
    EXPECT_DOUBLE_EQ(rate.algbw, double(rate.bytes) / rate.seconds);
    const double factor = (rate.kind == OpKind::AllReduce ? 2.0 : 1.0) * (n - 1) / n;  // nccl-tests
    EXPECT_NEAR(rate.busbw, rate.algbw * factor, 1e-9 * rate.algbw) << to_string(rate.kind);
  }
  // The CPU backend's own costs: every group size 2 .. n, and rank 0's layer and engine costs on
  // every rank.
  ASSERT_EQ(c.group_collectives.size(), std::size_t(n - 1));
  for (int g = 2; g <= n; ++g) {
    EXPECT_EQ(c.group_collectives[std::size_t(g - 2)].ranks, g);
    EXPECT_GT(c.group_collectives[std::size_t(g - 2)].bandwidth, 0);
  }
  const LayerCost& block = c.layer_forward[std::size_t(LayerKind::TransformerBlock)];
  EXPECT_GT(block.per_matmul_flop + block.per_attention_flop + block.per_element, 0);
  EXPECT_GT(c.engine.mixed_optimizer_per_byte, 0);
  EXPECT_GT(c.engine.host_optimizer_per_byte, 0);
  EXPECT_DOUBLE_EQ(comm.report_sum(block.per_element), n * block.per_element);
  EXPECT_DOUBLE_EQ(comm.report_sum(c.engine.copy_per_byte), n * c.engine.copy_per_byte);
  // 16-bit reductions per group and the engine's fp32 collectives, measured on their own.
  for (const GroupCollectives& g : c.group_collectives)
    EXPECT_GT(g.sixteen_bit_reduce_bandwidth, 0);
  EXPECT_GT(c.engine.all_reduce_fp32_per_byte, 0);
  EXPECT_GT(c.engine.reduce_scatter_fp32_per_byte, 0);
  EXPECT_GT(c.engine.all_gather_fp32_per_byte, 0);
  // NVMe requests at the occupancy's counts of ranks, the same figures on every rank.
  ASSERT_EQ(c.nvme_requests.size(), c.occupancy.size());
  for (std::size_t i = 0; i < c.occupancy.size(); ++i) {
    const NvmeRequestCosts& r = c.nvme_requests[i];
    EXPECT_EQ(r.ranks, c.occupancy[i].ranks);
    for (const double figure :
         {r.read_latency, r.write_latency, r.tensor_read_latency, r.tensor_write_latency,
          r.tensor_read_per_byte, r.tensor_write_per_byte}) {
      EXPECT_GE(figure, 0);
      EXPECT_DOUBLE_EQ(comm.report_sum(figure), n * figure);
    }
  }
  comm.barrier();
  EXPECT_TRUE(fs::is_empty(dir));  // every rank removed its object
  comm.barrier();
  if (comm.rank() == 0) fs::remove_all(dir);
}

TEST(MpiCalibrate, AMissingNvmePathFailsOnEveryRankWithoutHanging) {
  Communicator& comm = world();
  CalibrateOptions options = quick_calibrate_options();
  options.gemm_sizes = {16};
  options.stream_elements = 1 << 12;
  options.adam_parameters = 1 << 12;
  options.message_sizes = {4096};
  options.repeats = 1;
  // Only rank 0 gets a bad path: the others must fail too instead of waiting for it.
  options.nvme_path =
      comm.rank() == 0 ? "/nonexistent/zerolens" : std::filesystem::temp_directory_path().string();
  EXPECT_THROW(calibrate(comm, options), std::exception);
  comm.barrier();
}

}  // namespace
}  // namespace zerolens::exec
