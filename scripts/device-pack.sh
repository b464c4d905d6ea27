#!/usr/bin/env bash
# Builds the GPU binaries for the lent device machine (sm_90, static CUDA runtime, no GUI or
# fuzzers) in build/device and packs them with an Open MPI runtime into .devrt
# (../shared/device/README.md), archived as .devrt-pack/devrt.tar.gz (both git-ignored) for the
# device tool to carry, and fills .whl with DeepSpeed and its wheels (scripts/device-wheels.sh). Run
# here, then on the device:
#   carry [".devrt-pack", ".whl"], command: DEVICE_DEADLINE=480 scripts/device-check.sh
# usage: scripts/device-pack.sh [extra cmake configure arguments]
# Environment: DEVICE_ARCH (90), DEVICE_BUILD (build/device), DEVICE_RUNTIME (.devrt).
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${DEVICE_ARCH:-90}
build=${DEVICE_BUILD:-build/device}
runtime=${DEVICE_RUNTIME:-.devrt}
pack=../shared/device/pack-runtime.sh
[ -x "$pack" ] || { echo "device-pack: $pack not found (shared/ beside the checkout)" >&2; exit 2; }
[ -x /usr/local/cuda/bin/nvcc ] || { echo "device-pack: no CUDA toolkit at /usr/local/cuda" >&2; exit 2; }
scripts/install-deps.sh

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DCMAKE_CUDA_RUNTIME_LIBRARY=Static -DMPI_CXX_SKIP_MPICXX=ON -DZEROLENS_BUILD_GUI=OFF \
  -DZEROLENS_BUILD_FUZZERS=OFF "$@" >/dev/null
targets=(zerolens zerolens_cuda_kernel_tests zerolens_exec_cuda_tests zerolens_exec_cuda_mpi_tests
         zerolens_exec_mpi_tests zerolens_cuda_benchmarks zerolens_exec_backend_tests)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"

executables=("$build/cli/zerolens")
for target in "${targets[@]:1}"; do
  found=$(find "$build/tests" -maxdepth 2 -type f -name "$target" -perm -u+x | head -n 1)
  [ -n "$found" ] || { echo "device-pack: $target was not built" >&2; exit 1; }
  executables+=("$found")
done
rm -rf "$runtime"
"$pack" "$runtime" "${executables[@]}"
# OpenBLAS alone is 36 MiB: the folder travels as one gzip archive (about a third of its size),
# which device-check.sh unpacks there.
archive_dir=${runtime}-pack
mkdir -p "$archive_dir"
tar -czf "$archive_dir/devrt.tar.gz" "$runtime"
scripts/device-wheels.sh .whl
size_mib=$(du -smc "$archive_dir" .whl | tail -n 1 | cut -f1)
tree_mib=$(git ls-files -z -co --exclude-standard | du -cm --files0-from=- | tail -n 1 | cut -f1)
echo "device-pack: $archive_dir/devrt.tar.gz holds ${#executables[@]} executables and the MPI runtime;" \
  "with .whl ${size_mib} MiB, and the ${tree_mib} MiB of tracked files"
[ $((size_mib + tree_mib)) -lt 64 ] || { echo "device-pack: over the device tool's 64 MiB" >&2; exit 1; }
echo "device-pack: on the device tool: carry [\"$archive_dir\", \".whl\"], command DEVICE_DEADLINE=480 scripts/device-check.sh"
