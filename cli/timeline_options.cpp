#include "cli/timeline_options.hpp"

namespace zerolens::cli {

TimelineOptions TimelineFlags::options() const {
  return {compute_efficiency, memory_efficiency, cpu_efficiency, parse_collective_algorithm(algorithm)};
}

void add_timeline_options(CLI::App& app, TimelineFlags& flags, const std::string& group) {
  app.add_option("--algorithm", flags.algorithm, "Collective algorithm: ring, tree or auto (faster of the two)")
      ->check(CLI::IsMember({"ring", "tree", "auto"}))->capture_default_str()->group(group);
  app.add_option("--compute-efficiency", flags.compute_efficiency,
                 "Achieved fraction of peak FLOP/s")
      ->check(CLI::Range(kMinEfficiency, kMaxEfficiency))
      ->capture_default_str()
      ->group(group);
  app.add_option("--memory-efficiency", flags.memory_efficiency,
                 "Achieved fraction of HBM bandwidth")
      ->check(CLI::Range(kMinEfficiency, kMaxEfficiency))
      ->capture_default_str()
      ->group(group);
  app.add_option("--cpu-efficiency", flags.cpu_efficiency,
                 "Achieved fraction of host memory bandwidth (CPU Adam)")
      ->check(CLI::Range(kMinEfficiency, kMaxEfficiency))
      ->capture_default_str()
      ->group(group);
}

}  // namespace zerolens::cli
