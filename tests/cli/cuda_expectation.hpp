#pragma once
// What `--device cuda` must say on a machine without a usable GPU (or in a build without CUDA),
// for the CLI tests; std::nullopt where a device is present (the caller skips).
#include <optional>
#include <string>

#ifdef ZEROLENS_WITH_CUDA
#include "exec/cuda/cuda_status.hpp"
#endif

namespace zerolens::cli_testing {

inline std::optional<std::string> no_cuda_device_message() {
#ifdef ZEROLENS_WITH_CUDA
  const auto probe = zerolens::exec::probe_cuda_devices();
  if (probe.count > 0) return std::nullopt;
  return "--device cuda: no CUDA device on rank 0: " + probe.reason;
#else
  return "--device cuda: this build has no CUDA support";
#endif
}

}  // namespace zerolens::cli_testing
