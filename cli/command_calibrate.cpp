// `zerolens calibrate`: measures this machine (exec/calibrate/calibrate.hpp) and writes a cluster
// JSON that `zerolens plan --cluster FILE` reads. Under mpirun every rank measures; rank 0 writes.
#include <cctype>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "cli/table.hpp"
#include "exec/backends.hpp"
#include "exec/calibrate/calibrate.hpp"
#include "exec/run/calibrate_executor.hpp"
#include "sim/hardware/cluster_json.hpp"
#include "sim/hardware/hardware.hpp"

namespace zerolens::cli {
namespace {

struct CalibrateCommand {
  bool quick = false, buffered = false;
  std::optional<std::string> nvme_path, nvme_bytes, block_size, report;
  std::vector<std::string> sizes;
  std::vector<std::size_t> gemm_sizes;
  std::optional<int> queue_depth, repeats, threads, passes;
  std::string name, output, device = "cpu";
};

// "4096", "64KiB", "1 MiB", "0.5GB".
Bytes parse_byte_size(const std::string& text, const std::string& flag) {
  static const std::map<std::string, double> units = {
      {"", 1},     {"B", 1},        {"KB", 1e3},        {"MB", 1e6},
      {"GB", 1e9}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
  std::size_t used = 0;
  double number = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    throw InputError(flag, "expected a size such as 4096, 64KiB or 1MiB, got '" + text + "'");
  }
  std::string unit = text.substr(used);
  unit.erase(0, unit.find_first_not_of(' '));
  const auto it = units.find(unit);
  if (it == units.end())
    throw InputError(
        flag, "unknown unit '" + unit + "' in '" + text + "' (B, KB, MB, GB, KiB, MiB, GiB)");
  const double bytes = number * it->second;
  if (!std::isfinite(bytes) || bytes < 1 || bytes > 0x1p50 || bytes != std::floor(bytes)) {
    throw InputError(flag, "'" + text + "' must be a whole number of bytes between 1 and 2^50");
  }
  return Bytes(bytes);
}

exec::CalibrateOptions make_options(const CalibrateCommand& command) {
  exec::CalibrateOptions options =
      command.quick ? exec::quick_calibrate_options() : exec::CalibrateOptions{};
  if (!command.sizes.empty()) {
    options.message_sizes.clear();
    for (const auto& size : command.sizes)
      options.message_sizes.push_back(parse_byte_size(size, "--sizes"));
  }
  if (!command.gemm_sizes.empty()) options.gemm_sizes = command.gemm_sizes;
  options.nvme_path = command.nvme_path;
  if (command.nvme_bytes) options.nvme_bytes = parse_byte_size(*command.nvme_bytes, "--nvme-bytes");
  if (command.block_size) {
    const Bytes block = parse_byte_size(*command.block_size, "--block-size");
    if (block % Bytes(exec::kNvmeAlignment) != 0 || block > (Bytes{1} << 30)) {
      throw InputError("--block-size", "'" + *command.block_size +
                                           "' must be a multiple of 4096 bytes, at most 1 GiB");
    }
    options.nvme.block_size = std::size_t(block);
  }
  if (command.queue_depth) options.nvme.queue_depth = *command.queue_depth;
  options.nvme.direct = !command.buffered;
  if (command.repeats) options.repeats = *command.repeats;
  if (command.passes) options.compute_passes = *command.passes;
  if (command.threads) options.threads = *command.threads;
  exec::validate(options);
  return options;
}

std::string rate(double value, const char* unit, double scale = 1e9) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(2) << value / scale << ' ' << unit;
  return text.str();
}

void print_host(std::ostream& out, const exec::Calibration& c) {
  out << "zerolens calibrate: " << c.host << " (" << c.cpu_model << "), " << c.ranks
      << " rank(s) x " << c.threads << " thread(s), " << c.cpu_cores << " cores, "
      << format_bytes(c.host_memory, SizeUnit::GiB) << '\n';
  Table host({"measurement (per rank, all ranks at once)", "rate"});
  for (const auto& gemm : c.gemm)
    host.add_row({"GEMM fp32 n=" + std::to_string(gemm.n), rate(gemm.flops_per_second, "GFLOP/s")});
  host.add_row({"STREAM copy (8 B/element)", rate(c.copy_bytes_per_second, "GB/s")});
  host.add_row({"STREAM triad (12 B/element)", rate(c.triad_bytes_per_second, "GB/s")});
  host.add_row({"host Adam, parameters", rate(c.adam_parameters_per_second, "Mparam/s", 1e6)});
  host.add_row({"host Adam (28 B/parameter)", rate(c.adam_bytes_per_second, "GB/s")});
  host.add_row({"host Adam / STREAM triad", rate(c.adam_over_triad(), "", 1)});
  host.print(out);
}

void print_gpu(std::ostream& out, const exec::GpuCalibration& g) {
  out << "GPU: " << g.name << ", " << format_bytes(g.memory_bytes, SizeUnit::GiB)
      << "; collectives over " << g.collective_backend << " (" << g.backend_reason << ")\n";
  Table gpu({"measurement (per rank, all ranks at once)", "rate"});
  const auto add_gemms = [&](const std::string& format, const std::vector<exec::GemmRate>& rates) {
    for (const auto& gemm : rates) {
      gpu.add_row({"GEMM " + format + " n=" + std::to_string(gemm.n),
                   rate(gemm.flops_per_second, "TFLOP/s", 1e12)});
    }
  };
  add_gemms("fp32", g.gemm_fp32);
  add_gemms("bf16", g.gemm_bf16);
  gpu.add_row({"HBM device copy (2 x size)", rate(g.hbm_bytes_per_second, "GB/s")});
  gpu.add_row({"PCIe host-to-device (pinned)", rate(g.h2d_bytes_per_second, "GB/s")});
  gpu.add_row({"PCIe device-to-host (pinned)", rate(g.d2h_bytes_per_second, "GB/s")});
  gpu.print(out);
}

void print_io(std::ostream& out, const exec::Calibration& c) {
  if (!c.collectives.empty()) {
    Table collectives({"collective", "bytes", "time us", "algbw GB/s", "busbw GB/s"});
    for (const auto& r : c.collectives) {
      collectives.add_row({to_string(r.kind), std::to_string(r.bytes), rate(r.seconds, "", 1e-6),
                           rate(r.algbw, ""), rate(r.busbw, "")});
    }
    collectives.print(out);
  } else {
    out << "  collectives: not measured (one rank; run under mpirun -np N)\n";
  }
  if (!c.nvme) {
    out << "  NVMe: not measured (no --nvme-path)\n";
    return;
  }
  const auto& n = *c.nvme;
  out << "  NVMe " << n.path << ", " << to_string(n.mode)
      << (n.mode_reason.empty() ? "" : " (" + n.mode_reason + ")") << ", block " << n.block_size
      << " B, queue depth " << n.queue_depth << ", " << n.bytes_per_rank << " B per rank: write "
      << rate(n.write_bytes_per_second, "GB/s") << " (new file), "
      << rate(n.overwrite_bytes_per_second, "GB/s") << " (over the previous version), read "
      << rate(n.read_bytes_per_second, "GB/s") << " (whole node)\n";
}

// The CPU backend's own costs (docs/calibrate.md): what the simulator prices its steps with.
void print_cpu_backend(std::ostream& out, const exec::Calibration& c) {
  if (!c.group_collectives.empty()) {
    Table groups({"collectives, group of", "latency us per call", "bus GB/s",
                  "16-bit reduce latency us", "16-bit reduce bus GB/s"});
    for (const GroupCollectives& g : c.group_collectives) {
      groups.add_row({std::to_string(g.ranks) + " ranks (others idle)", rate(g.latency, "", 1e-6),
                      rate(g.bandwidth, ""), rate(g.sixteen_bit_reduce_latency, "", 1e-6),
                      rate(g.sixteen_bit_reduce_bandwidth, "")});
    }
    groups.print(out);
  }
  // Seconds per FLOP shown as the rate it amounts to (GFLOP/s; "-" for none).
  const auto per_flop = [](double seconds) {
    return seconds > 0 ? rate(1 / seconds, "") : std::string("-");
  };
  Table layers({"executor layer (fitted over the grid)", "matmul GFLOP/s", "attention GFLOP/s",
                "ns / element"});
  for (int k = 0; k < kLayerKindCount; ++k) {
    for (const bool backward : {false, true}) {
      const LayerCost& cost =
          backward ? c.layer_backward[std::size_t(k)] : c.layer_forward[std::size_t(k)];
      if (cost.per_matmul_flop == 0 && cost.per_attention_flop == 0 && cost.per_element == 0)
        continue;
      layers.add_row({std::string(to_string(LayerKind(k))) + (backward ? " backward" : " forward"),
                      per_flop(cost.per_matmul_flop), per_flop(cost.per_attention_flop),
                      rate(cost.per_element, "", 1e-9)});
    }
  }
  layers.print(out);
  const EngineCosts& e = c.engine;
  Table engine({"engine on one rank", "ns per unit"});
  engine.add_row({"all-reduce 16-bit, per message byte", rate(e.all_reduce_per_byte, "", 1e-9)});
  engine.add_row(
      {"reduce-scatter 16-bit, per message byte", rate(e.reduce_scatter_per_byte, "", 1e-9)});
  engine.add_row({"all-gather 16-bit, per message byte", rate(e.all_gather_per_byte, "", 1e-9)});
  engine.add_row({"all-reduce fp32, per message byte", rate(e.all_reduce_fp32_per_byte, "", 1e-9)});
  engine.add_row(
      {"reduce-scatter fp32, per message byte", rate(e.reduce_scatter_fp32_per_byte, "", 1e-9)});
  engine.add_row({"all-gather fp32, per message byte", rate(e.all_gather_fp32_per_byte, "", 1e-9)});
  engine.add_row({"gradient norm, per owned element", rate(e.norm_per_element, "", 1e-9)});
  engine.add_row({"optimizer fp32, per byte touched", rate(e.optimizer_per_byte, "", 1e-9)});
  engine.add_row(
      {"optimizer 16-bit, per byte touched", rate(e.mixed_optimizer_per_byte, "", 1e-9)});
  engine.add_row({"host optimizer, per byte touched", rate(e.host_optimizer_per_byte, "", 1e-9)});
  engine.add_row({"host <-> device copy, per byte", rate(e.copy_per_byte, "", 1e-9)});
  engine.print(out);
  if (!c.occupancy.empty()) {
    Table occupancy({"reference step in lock step", "over 1 rank"});
    for (const Occupancy& o : c.occupancy)
      occupancy.add_row({std::to_string(o.ranks) + " rank(s)", rate(o.factor, "", 1)});
    occupancy.print(out);
  }
  if (!c.nvme_requests.empty()) {
    Table nvme({"NVMe requests in lock step", "read us beyond bytes", "write us beyond bytes",
                "tensor read us + ns/KB", "tensor write us + ns/KB"});
    const auto tensor = [&](double per_request, double per_byte) {
      std::ostringstream text;
      text << std::fixed << std::setprecision(2) << per_request * 1e6 << " + " << per_byte * 1e12;
      return text.str();
    };
    for (const NvmeRequestCosts& n : c.nvme_requests) {
      nvme.add_row({std::to_string(n.ranks) + " rank(s) swapping", rate(n.read_latency, "", 1e-6),
                    rate(n.write_latency, "", 1e-6),
                    tensor(n.tensor_read_latency, n.tensor_read_per_byte),
                    tensor(n.tensor_write_latency, n.tensor_write_per_byte)});
    }
    nvme.print(out);
  }
  if (c.reference_step_seconds > 0) {
    out << "  reference step on 1 rank: " << rate(c.reference_step_seconds, "ms", 1e-3)
        << " (how fast the machine was: compare calibrations by it)\n";
  }
}

int run_calibrate(const CalibrateCommand& command) {
  exec::CalibrateOptions options = make_options(command);
  auto comm = exec::make_mpi_communicator();
  exec::use_a_share_of_the_cores(*comm);  // as the runs it calibrates for
  // Before anything is measured, on every rank: an unknown device, or one the build or a rank
  // lacks, stops here.
  const std::unique_ptr<exec::DeviceCalibrator> device =
      exec::make_device_calibrator(command.device);
  // A GPU's GEMMs reach their peak only at larger sizes than the host's.
  if (device && command.gemm_sizes.empty())
    options.gemm_sizes = exec::gpu_gemm_sizes(command.quick);
  const bool writer = comm->rank() == 0;
  std::unique_ptr<Output> output = writer ? std::make_unique<Output>(command.output) : nullptr;
  std::unique_ptr<Output> report =
      writer && command.report ? std::make_unique<Output>(*command.report) : nullptr;
  exec::Calibration calibration;
  try {
    calibration = exec::calibrate(*comm, options, device.get(), exec::measure_cpu_backend);
  } catch (const exec::NvmeError& error) {
    throw InputError("--nvme-path", error.what());
  }
  if (!writer) return kExitOk;
  print_host(std::cerr, calibration);
  if (calibration.gpu) print_gpu(std::cerr, *calibration.gpu);
  print_io(std::cerr, calibration);
  if (!calibration.gpu) print_cpu_backend(std::cerr, calibration);
  output->stream() << cluster_to_json(exec::calibrated_cluster(calibration, command.name)).dump(2)
                   << '\n';
  if (report) report->stream() << exec::calibration_to_json(calibration).dump(2) << '\n';
  return kExitOk;
}

}  // namespace

void register_calibrate_command(CLI::App& app, CommandRegistry& registry) {
  auto command = std::make_shared<CalibrateCommand>();
  CLI::App* calibrate = app.add_subcommand(
      "calibrate",
      "Measure this machine (GEMM, memory bandwidth, host Adam, collectives, NVMe) and write a "
      "cluster JSON "
      "for --cluster; under mpirun every rank measures and rank 0 writes (docs/calibrate.md)");
  calibrate->add_option("-o,--output", command->output,
                        "Write the cluster JSON to FILE (default: standard output)");
  calibrate->add_option("--report", command->report,
                        "Also write every measurement as JSON (schema zerolens.calibration)");
  calibrate->add_option("--name", command->name, "Cluster name (default: calibrated-<host>)");
  calibrate->add_option("--device", command->device,
                        "cpu (default: ranks as the CPU backend's GPUs) or cuda (each rank's GPU)");
  calibrate->add_flag("--quick", command->quick,
                      "Smaller arrays, fewer sizes and repeats: seconds, not a minute");
  calibrate
      ->add_option("--sizes", command->sizes,
                   "Collective message sizes, e.g. 4KiB,1MiB,16MiB (nccl-tests' S)")
      ->delimiter(',');
  calibrate
      ->add_option("--gemm-sizes", command->gemm_sizes,
                   "GEMM sizes n (n x n x n), e.g. 256,512,1024 (cuda: 1024,2048,4096,8192)")
      ->delimiter(',');
  calibrate->add_option("--passes", command->passes,
                        "CPU backend: measure its layers and engine N times and keep the fastest "
                        "pass (a shared host's speed drifts; default 1)");
  calibrate->add_option("--repeats", command->repeats,
                        "Timed runs per measurement (default 5, --quick 3)");
  calibrate->add_option("--threads", command->threads,
                        "OpenMP threads of the STREAM and Adam kernels (default: the node's cores "
                        "/ ranks on it, as the runs use; OMP_NUM_THREADS overrides)");
  auto* nvme = "NVMe";
  calibrate
      ->add_option("--nvme-path", command->nvme_path,
                   "Directory on the NVMe drive to measure (DeepSpeed's nvme_path)")
      ->group(nvme);
  calibrate
      ->add_option("--nvme-bytes", command->nvme_bytes,
                   "Bytes each rank writes and reads (default 256MiB, --quick 32MiB)")
      ->group(nvme);
  calibrate
      ->add_option("--block-size", command->block_size,
                   "I/O piece size, DeepSpeed aio.block_size (default 1MiB)")
      ->group(nvme);
  calibrate
      ->add_option("--queue-depth", command->queue_depth,
                   "Pieces in flight, DeepSpeed aio.queue_depth (default 8)")
      ->group(nvme);
  calibrate->add_flag("--buffered", command->buffered, "Use the page cache instead of O_DIRECT")
      ->group(nvme);
  registry.add(calibrate, [command] { return run_calibrate(*command); });
}

}  // namespace zerolens::cli
