#pragma once
// `zerolens calibrate --device cuda`: every rank measures its GPU (GEMM through kernels/cuda's
// cuBLASLt matmul, device-to-device copy, pinned host <-> device copies; each timed with CUDA
// events) and runs the collectives through make_gpu_communicator on device buffers.
// docs/calibrate.md, "--device cuda", gives the conventions. Plain C++: the CLI includes it.
#include <memory>

#include "exec/calibrate/calibrate.hpp"

namespace zerolens::exec {

// Collective over MPI_COMM_WORLD. When any rank has no CUDA device every rank throws
// InputError("--device cuda", "no CUDA device on rank R: <probe's failing call and error>"), so
// no rank is left waiting.
std::unique_ptr<DeviceCalibrator> make_gpu_calibrator();

}  // namespace zerolens::exec
