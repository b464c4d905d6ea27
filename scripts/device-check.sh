#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .devrt-pack carried (scripts/device-pack.sh):
# every GPU test, the kernel benchmarks, calibrate --device cuda, training on the CUDA backend
# next to the CPU backend, and the measured-trace matrix on the CUDA backend.
# Output goes under $OUT (the device tool brings it back), else under device-out/.
# usage: scripts/device-check.sh [all|tests|bench|calibrate|train|throughput|measure]...   (default: all)
# Each part runs even when an earlier one fails; the exit status is the first failure's.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
runtime=${DEVICE_RUNTIME:-.devrt}
out=${OUT:-device-out}
mkdir -p "$out"
if [ ! -f "$runtime/env.sh" ] && [ -f "$runtime-pack/devrt.tar.gz" ]; then
  tar -xzf "$runtime-pack/devrt.tar.gz" || exit 2
fi
[ -f "$runtime/env.sh" ] ||
  { echo "device-check: $runtime/env.sh missing: run scripts/device-pack.sh here and carry $runtime-pack" >&2; exit 2; }
# shellcheck source=/dev/null
source "$runtime/env.sh"
devrt-check || exit 2
bin=$runtime/bin
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(all)
status=0

run() {  # name command...: runs, keeps the output in $out/name.txt, remembers the first failure
  local name=$1
  shift
  echo "== $name: $*"
  "$@" >"$out/$name.txt" 2>&1
  local rc=$?
  tail -n 5 "$out/$name.txt"
  [ $rc -eq 0 ] || { echo "== $name failed (exit $rc)"; [ $status -ne 0 ] || status=$rc; }
}

wants() { [[ " ${parts[*]} " == *" all "* || " ${parts[*]} " == *" $1 "* ]]; }

if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/gpu.txt" 2>&1
else
  echo "no nvidia-smi on this machine" >"$out/gpu.txt"
fi
cat "$out/gpu.txt"
if wants tests; then
  run cuda-kernel-tests "$bin/zerolens_cuda_kernel_tests"
  run exec-cuda-tests "$bin/zerolens_exec_cuda_tests"
  run exec-cuda-mpi-np1 mpirun -np 1 "$bin/zerolens_exec_cuda_mpi_tests"
  run exec-cuda-mpi-np2 mpirun -np 2 "$bin/zerolens_exec_cuda_mpi_tests"  # staged: two ranks, one GPU
  run exec-mpi-np2 mpirun -np 2 "$bin/zerolens_exec_mpi_tests"
fi
if wants bench; then
  run cuda-benchmarks "$bin/zerolens_cuda_benchmarks" --benchmark_out="$out/cuda-benchmarks.json" \
    --benchmark_out_format=json
fi
if wants calibrate; then
  run calibrate-cuda "$bin/zerolens" calibrate --device cuda --quick --report "$out/calibrate.report.json" \
    -o "$out/calibrated-cluster.json"
fi
if wants train; then  # the same run on both backends: the losses should agree (bf16: within 2%)
  small=(--steps 20 --stage 2 --precision bf16 --log-every 1)
  run train-cpu "$bin/zerolens" run "${small[@]}"
  run train-cuda "$bin/zerolens" run --device cuda "${small[@]}"
  run validate-cuda "$bin/zerolens" validate --device cuda --steps 5 --stage 3 --log-every 0 \
    --measured-trace "$out/validate-cuda.measured.json"
fi
if wants throughput; then  # issue 6's benchmark: GPT-2 124M tokens/s, zerolens over PyTorch (target 0.9)
  shape=(--seq-len 1024 --micro-batch 4 --precision bf16 --steps 10)
  run zerolens-124m "$bin/zerolens" run --device cuda --model gpt2-124m "${shape[@]}" --log-every 1 \
    --measured-trace "$out/zerolens-124m.measured.json"
  run torch-124m "${TORCH_PYTHON:-/opt/torch/.venv/bin/python}" traces/torch_reference.py --preset gpt2-124m \
    "${shape[@]}" --mode plain -o "$out/torch-124m.json"
  run throughput-ratio python3 scripts/throughput-ratio.py "$out/zerolens-124m.measured.json" "$out/torch-124m.json"
fi
if wants measure; then
  run measure traces/measure.sh --zerolens "$bin/zerolens" --mpirun "$bin/mpirun" --out "$out/measured" \
    --validate-args "--device cuda"
fi
echo "device-check: outputs in $out (exit $status)"
exit $status
