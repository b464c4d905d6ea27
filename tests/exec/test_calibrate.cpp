// `zerolens calibrate`'s arithmetic and mapping: nccl-tests' bus bandwidth worked by hand and the
// cluster built from hand-made measurements (read back by the simulator's own cluster reader).
// The measurements themselves run in mpi_test_calibrate.cpp.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "exec/calibrate/calibrate.hpp"
#include "sim/core/error.hpp"
#include "sim/hardware/cluster_json.hpp"

namespace zerolens::exec {
namespace {

TEST(Calibrate, BusBandwidthIsNcclTestsDefinition) {
  // nccl-tests doc/PERFORMANCE.md: busbw = algbw x 2(n-1)/n for all-reduce, x (n-1)/n for
  // all-gather and reduce-scatter, with S the whole buffer (gathered output, scattered input).
  // S = 1e6 bytes in 1 ms: algbw = 1e9 B/s.
  EXPECT_DOUBLE_EQ(bus_bandwidth(OpKind::AllReduce, 1'000'000, 4, 1e-3), 1.5e9);
  EXPECT_DOUBLE_EQ(bus_bandwidth(OpKind::AllGather, 1'000'000, 4, 1e-3), 0.75e9);
  EXPECT_DOUBLE_EQ(bus_bandwidth(OpKind::ReduceScatter, 8'000'000, 8, 1e-3), 7e9);
  EXPECT_DOUBLE_EQ(bus_bandwidth(OpKind::AllReduce, 1'000'000, 2, 1e-3), 1e9);
  EXPECT_DOUBLE_EQ(bus_bandwidth(OpKind::AllReduce, 1'000'000, 1, 1e-3), 0);
}

Calibration two_ranks() {
  Calibration c;
  c.host = "box";
  c.cpu_model = "Test CPU";
  c.ranks = 2;
  c.cpu_cores = 8;
  c.threads = 4;
  c.host_memory = Bytes{64} << 30;
  c.gemm = {{256, 1e-3, 40e9}, {512, 5e-3, 55e9}};
  c.copy_bytes_per_second = 8e9;
  c.triad_bytes_per_second = 10e9;
  c.adam_parameters_per_second = 300e6;
  c.adam_bytes_per_second = 8.4e9;
  // Smallest size 4096: all-reduce 20 us (2 x (n-1) = 2 ring steps), others 10 us (1 step).
  // Largest 1 MiB: busbw 3, 4 and 5 GB/s.
  c.collectives = {
      {OpKind::AllReduce, 4096, 20e-6, 0, 0},     {OpKind::AllReduce, 1 << 20, 0, 0, 3e9},
      {OpKind::AllGather, 4096, 10e-6, 0, 0},     {OpKind::AllGather, 1 << 20, 0, 0, 4e9},
      {OpKind::ReduceScatter, 4096, 10e-6, 0, 0}, {OpKind::ReduceScatter, 1 << 20, 0, 0, 5e9}};
  c.nvme = NvmeRate{"/nvme", NvmeMode::Direct, "", 1 << 20, 1 << 20, 8, 2e9, 1.5e9, 3e9, Bytes{500} << 30};
  return c;
}

TEST(Calibrate, ClusterFieldsComeFromTheMeasurementsDocumented) {
  const Calibration c = two_ranks();
  const Cluster cluster = calibrated_cluster(c);
  EXPECT_EQ(cluster.name, "calibrated-box");
  EXPECT_EQ(cluster.nodes, 1);
  EXPECT_EQ(cluster.node.gpus_per_node, 2);
  EXPECT_EQ(cluster.gpu.memory_bytes, Bytes{32} << 30);  // host memory shared by the ranks
  EXPECT_DOUBLE_EQ(cluster.gpu.peak_flops_fp32, 55e9);   // the best GEMM size
  EXPECT_DOUBLE_EQ(cluster.gpu.peak_flops_fp16, 55e9);
  EXPECT_DOUBLE_EQ(cluster.gpu.hbm_bandwidth, 10e9);          // triad per rank
  EXPECT_DOUBLE_EQ(cluster.node.cpu_memory_bandwidth, 20e9);  // both ranks
  EXPECT_EQ(cluster.node.cpu_cores, 8);
  EXPECT_EQ(cluster.node.nvme_capacity_bytes, Bytes{500} << 30);
  EXPECT_DOUBLE_EQ(cluster.node.nvme_read_bandwidth, 3e9);
  EXPECT_DOUBLE_EQ(cluster.node.nvme_write_bandwidth, 1.5e9);  // overwriting, as the engine does
  EXPECT_DOUBLE_EQ(cluster.node.intra_node.bandwidth, 4e9);  // mean busbw at 1 MiB
  EXPECT_DOUBLE_EQ(cluster.node.intra_node.latency, 10e-6);  // per ring step at 4 KiB
  EXPECT_DOUBLE_EQ(cluster.node.pcie.bandwidth, 8e9);        // host copy
  EXPECT_DOUBLE_EQ(cluster.inter_node.bandwidth, 4e9);
  EXPECT_EQ(calibrated_cluster(c, "mine").name, "mine");
}

TEST(Calibrate, ClusterJsonLoadsWithTheSimulatorsReaderWithoutWarnings) {
  Calibration c = two_ranks();
  for (const bool with_nvme : {true, false}) {
    if (!with_nvme) c.nvme.reset();
    const Cluster written = calibrated_cluster(c);
    Diagnostics diagnostics;
    const Cluster read =
        cluster_from_json(nlohmann::json::parse(cluster_to_json(written).dump()), diagnostics);
    EXPECT_TRUE(diagnostics.warnings.empty());
    EXPECT_EQ(read.gpu.memory_bytes, written.gpu.memory_bytes);
    EXPECT_DOUBLE_EQ(read.node.intra_node.latency, written.node.intra_node.latency);
    EXPECT_EQ(read.node.nvme_capacity_bytes, with_nvme ? Bytes{500} << 30 : 0);
  }
}

TEST(Calibrate, OneRankWithoutCollectivesUsesTheHostCopyAsItsLink) {
  Calibration c = two_ranks();
  c.ranks = 1;
  c.collectives.clear();
  const Cluster cluster = calibrated_cluster(c);
  EXPECT_DOUBLE_EQ(cluster.node.intra_node.bandwidth, 8e9);
  EXPECT_NE(cluster.node.intra_node.name.find("not measured"), std::string::npos);
  EXPECT_DOUBLE_EQ(cluster.node.cpu_memory_bandwidth, 10e9);
}

// `--device cuda`: two ranks, each with an H100-like GPU; the host figures are two_ranks()'.
Calibration two_gpus() {
  Calibration c = two_ranks();
  c.gemm.clear();  // the host GEMM is not run when a GPU is measured
  GpuCalibration g;
  g.name = "NVIDIA H100 80GB HBM3";
  g.memory_bytes = Bytes{80} << 30;
  g.free_bytes = Bytes{79} << 30;
  g.gemm_fp32 = {{4096, 3e-3, 40e12}, {8192, 2e-2, 50e12}};
  g.gemm_bf16 = {{4096, 2e-4, 600e12}, {8192, 1.5e-3, 700e12}};
  g.copy_bytes = Bytes{1} << 30;
  g.hbm_bytes_per_second = 3e12;
  g.transfer_bytes = Bytes{256} << 20;
  g.h2d_bytes_per_second = 30e9;
  g.d2h_bytes_per_second = 20e9;
  g.collective_backend = "nccl";
  g.backend_reason = "every rank has its own GPU";
  c.gpu = g;
  return c;
}

TEST(Calibrate, GpuClusterFieldsComeFromTheGpuMeasurements) {
  const Cluster cluster = calibrated_cluster(two_gpus());
  EXPECT_EQ(cluster.gpu.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(cluster.gpu.memory_bytes, Bytes{80} << 30);  // the device's, not host memory / ranks
  EXPECT_DOUBLE_EQ(cluster.gpu.peak_flops_fp32, 50e12);   // best fp32 GEMM
  EXPECT_DOUBLE_EQ(cluster.gpu.peak_flops_bf16, 700e12);  // best bf16 GEMM
  EXPECT_DOUBLE_EQ(cluster.gpu.peak_flops_fp16, 700e12);  // priced as bf16
  EXPECT_DOUBLE_EQ(cluster.gpu.hbm_bandwidth, 3e12);      // device copy, read + write
  // Harmonic mean of 30 and 20 GB/s: 2 / (1/30 + 1/20) = 24 GB/s, so 1 GB each way takes
  // 1/30 + 1/20 s either way.
  EXPECT_DOUBLE_EQ(cluster.node.pcie.bandwidth, 24e9);
  EXPECT_DOUBLE_EQ(cluster.node.pcie.latency, 0);
  EXPECT_NE(cluster.node.pcie.name.find("PCIe"), std::string::npos);
  // The collectives, host and NVMe fields are filled as on the CPU backend.
  EXPECT_EQ(cluster.node.intra_node.name, "nccl between GPUs (measured)");
  EXPECT_DOUBLE_EQ(cluster.node.intra_node.bandwidth, 4e9);
  EXPECT_DOUBLE_EQ(cluster.node.intra_node.latency, 10e-6);
  EXPECT_DOUBLE_EQ(cluster.inter_node.bandwidth, 4e9);
  EXPECT_EQ(cluster.node.gpus_per_node, 2);
  EXPECT_EQ(cluster.node.cpu_memory_bytes, Bytes{64} << 30);
  EXPECT_DOUBLE_EQ(cluster.node.cpu_memory_bandwidth, 20e9);
  EXPECT_EQ(cluster.node.cpu_cores, 8);
  EXPECT_DOUBLE_EQ(cluster.node.nvme_read_bandwidth, 3e9);
  EXPECT_DOUBLE_EQ(cluster.node.nvme_write_bandwidth, 1.5e9);

  Diagnostics diagnostics;
  const Cluster read =
      cluster_from_json(nlohmann::json::parse(cluster_to_json(cluster).dump()), diagnostics);
  EXPECT_TRUE(diagnostics.warnings.empty());
  EXPECT_EQ(read.gpu.name, cluster.gpu.name);
  EXPECT_DOUBLE_EQ(read.gpu.peak_flops_bf16, 700e12);
}

TEST(Calibrate, OneGpuWithoutCollectivesUsesTheDeviceCopyAsItsLink) {
  Calibration c = two_gpus();
  c.ranks = 1;
  c.collectives.clear();
  const Cluster cluster = calibrated_cluster(c);
  EXPECT_DOUBLE_EQ(cluster.node.intra_node.bandwidth, 3e12);
  EXPECT_EQ(cluster.node.intra_node.name, "not measured (1 rank): device memory copy");
}

TEST(Calibrate, ReportCarriesTheGpuSectionOnlyWhenMeasured) {
  const nlohmann::json report = calibration_to_json(two_gpus());
  const nlohmann::json& gpu = report.at("gpu");
  EXPECT_EQ(gpu.at("name"), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(gpu.at("memory_bytes"), Bytes{80} << 30);
  EXPECT_EQ(gpu.at("gemm_bf16").size(), 2u);
  EXPECT_EQ(gpu.at("gemm_fp32").at(1).at("n"), 8192);
  EXPECT_DOUBLE_EQ(gpu.at("hbm").at("bytes_per_second").get<double>(), 3e12);
  EXPECT_EQ(gpu.at("hbm").at("copy_bytes"), Bytes{1} << 30);
  EXPECT_DOUBLE_EQ(gpu.at("pcie").at("h2d_bytes_per_second").get<double>(), 30e9);
  EXPECT_DOUBLE_EQ(gpu.at("pcie").at("d2h_bytes_per_second").get<double>(), 20e9);
  EXPECT_EQ(gpu.at("collective_backend"), "nccl");
  EXPECT_TRUE(report.at("gemm_fp32").empty());
  EXPECT_TRUE(calibration_to_json(two_ranks()).at("gpu").is_null());
}

// The CPU backend's own costs go into the cluster's calibration (the simulator's CPU-rank model);
// a GPU calibration only marks the cluster as measured, with its whole group's collectives.
TEST(Calibrate, ClusterCarriesTheCalibrationItWasMeasuredWith) {
  Calibration c = two_ranks();
  c.group_collectives = {{2, 3e-6, 4e9}};
  c.layer_forward[std::size_t(LayerKind::TransformerBlock)] = {1e-11, 2e-10, 3e-9};
  c.layer_backward[std::size_t(LayerKind::LmHead)] = {4e-11, 0, 5e-9};
  c.engine.mixed_optimizer_per_byte = 6e-10;
  const Cluster cluster = calibrated_cluster(c);
  ASSERT_TRUE(cluster.calibration.has_value());
  const ClusterCalibration& k = *cluster.calibration;
  EXPECT_EQ(k.device, "cpu");
  EXPECT_EQ(k.ranks, 2);
  EXPECT_EQ(k.threads_per_rank, 4);
  ASSERT_EQ(k.collectives.size(), 1u);
  EXPECT_DOUBLE_EQ(k.collectives[0].latency, 3e-6);
  EXPECT_DOUBLE_EQ(k.forward[std::size_t(LayerKind::TransformerBlock)].per_attention_flop, 2e-10);
  EXPECT_DOUBLE_EQ(k.backward[std::size_t(LayerKind::LmHead)].per_element, 5e-9);
  EXPECT_DOUBLE_EQ(k.engine.mixed_optimizer_per_byte, 6e-10);
  Diagnostics diagnostics;
  const Cluster read =
      cluster_from_json(nlohmann::json::parse(cluster_to_json(cluster).dump()), diagnostics);
  EXPECT_TRUE(diagnostics.warnings.empty());
  ASSERT_TRUE(read.calibration.has_value());
  EXPECT_DOUBLE_EQ(read.calibration->forward[std::size_t(LayerKind::TransformerBlock)].per_element,
                   3e-9);

  const Cluster gpus = calibrated_cluster(two_gpus());
  ASSERT_TRUE(gpus.calibration.has_value());
  EXPECT_EQ(gpus.calibration->device, "cuda");
  ASSERT_EQ(gpus.calibration->collectives.size(), 1u);
  EXPECT_EQ(gpus.calibration->collectives[0].ranks, 2);
}

// Exact data: the fit finds the coefficients; a feature whose cost would come out negative is
// dropped (cost 0) rather than given a negative cost.
TEST(Calibrate, NonNegativeFitRecoversExactCosts) {
  std::vector<std::vector<double>> features = {
      {1e6, 1e5, 1e4}, {4e6, 2e5, 3e4}, {2e6, 8e5, 1e4}, {9e6, 1e5, 5e4}};
  std::vector<double> seconds;
  for (const auto& f : features) seconds.push_back(2e-11 * f[0] + 1e-10 * f[1] + 3e-9 * f[2]);
  const std::vector<double> fit = fit_nonnegative(features, seconds);
  ASSERT_EQ(fit.size(), 3u);
  EXPECT_NEAR(fit[0], 2e-11, 1e-15);
  EXPECT_NEAR(fit[1], 1e-10, 1e-14);
  EXPECT_NEAR(fit[2], 3e-9, 1e-13);
  seconds.clear();
  for (const auto& f : features) seconds.push_back(2e-11 * f[0] + 3e-9 * f[2] - 1e-12 * f[1]);
  const std::vector<double> clipped = fit_nonnegative(features, seconds);
  EXPECT_EQ(clipped[1], 0);
  EXPECT_GT(clipped[0], 0);
  EXPECT_GT(clipped[2], 0);
}

// A parameter swap measured on two models: 30 requests each, 0.1 MB and 0.4 MB, at 90 us a request
// and 1.5 ns a byte (2.7 + 0.15 = 2.85 ms, 2.7 + 0.6 = 3.3 ms): both costs come back. Requests of
// one size cannot part them (all per request: 2.85 / 30 = 95 us); a plan whose requests took no
// time beyond their bytes is left out; none left: zero.
TEST(Calibrate, RequestCostPartsPerRequestFromPerByte) {
  const RequestCost fit = fit_request_cost({30, 30}, {1e5, 4e5}, {2.85e-3, 3.3e-3});
  EXPECT_NEAR(fit.per_request, 90e-6, 1e-12);
  EXPECT_NEAR(fit.per_byte, 1.5e-9, 1e-15);
  const RequestCost one_size = fit_request_cost({30, 60}, {1e5, 2e5}, {2.85e-3, 5.7e-3});
  EXPECT_NEAR(one_size.per_request, 95e-6, 1e-12);
  EXPECT_EQ(one_size.per_byte, 0);
  const RequestCost one_left = fit_request_cost({30, 30}, {1e5, 4e5}, {2.85e-3, -1e-4});
  EXPECT_NEAR(one_left.per_request, 95e-6, 1e-12);
  EXPECT_EQ(one_left.per_byte, 0);
  // Times growing faster than the bytes would need a negative per-request cost: the one cost that
  // fits best is kept instead, here per byte.
  const RequestCost clipped = fit_request_cost({30, 30}, {1e5, 4e5}, {1e-3, 5e-3});
  EXPECT_EQ(clipped.per_request, 0);
  EXPECT_GT(clipped.per_byte, 1e-8);
  EXPECT_LT(clipped.per_byte, 1.25e-8);
  const RequestCost none = fit_request_cost({30}, {1e5}, {0});
  EXPECT_EQ(none.per_request, 0);
  EXPECT_EQ(none.per_byte, 0);
}

// The parameter swap's second model is the layer grid's smallest.
TEST(Calibrate, SmallestShapeIsTheGridsNarrowest) {
  CalibrateOptions options;
  EXPECT_EQ(smallest_shape(options).hidden, 32);
  options.layer_shapes = {{96, 6, 384, 32, 8}, {64, 4, 512, 128, 2}};
  EXPECT_EQ(smallest_shape(options).hidden, 64);
  options.layer_shapes.clear();
  EXPECT_EQ(smallest_shape(options).hidden, options.engine_shape.hidden);
}

// Hand-made collectives of a 4-rank group, 20 us per call and 1 GB/s of ring traffic: an all-reduce
// of 1 MB sends 2 x 3/4 MB per rank (1.5 ms), a reduce-scatter 3/4 MB (0.75 ms).
TEST(Calibrate, GroupCollectivesAreLatencyPlusRingTrafficOverBandwidth) {
  const auto rate = [](OpKind kind, Bytes bytes, double traffic) {
    return CollectiveRate{kind, bytes, 20e-6 + traffic / 1e9, 0, 0};
  };
  const std::vector<CollectiveRate> rates = {rate(OpKind::AllReduce, 4096, 2 * 0.75 * 4096),
                                             rate(OpKind::AllReduce, 1'000'000, 1.5e6),
                                             rate(OpKind::ReduceScatter, 4096, 0.75 * 4096),
                                             rate(OpKind::ReduceScatter, 1'000'000, 0.75e6)};
  const GroupCollectives group = fit_group_collectives(4, rates);
  EXPECT_EQ(group.ranks, 4);
  EXPECT_NEAR(group.latency, 20e-6, 1e-12);
  EXPECT_NEAR(group.bandwidth, 1e9, 1);
}

TEST(Calibrate, BadOptionsNameTheFlag) {
  CalibrateOptions options = quick_calibrate_options();
  options.gemm_sizes.clear();
  try {
    validate(options);
    FAIL();
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "--gemm-sizes");
  }
  options = quick_calibrate_options();
  options.message_sizes = {2};
  EXPECT_THROW(validate(options), InputError);
  options = quick_calibrate_options();
  options.repeats = 0;
  EXPECT_THROW(validate(options), InputError);
  options = quick_calibrate_options();
  options.compute_passes = 0;
  try {
    validate(options);
    FAIL();
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "--passes");
  }
}

}  // namespace
}  // namespace zerolens::exec
