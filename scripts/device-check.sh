#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .devrt-pack and .whl carried
# (scripts/device-pack.sh): every GPU test, the kernel benchmarks, calibrate --device cuda, training on
# the CUDA backend next to the CPU backend, real DeepSpeed/FSDP2/PyTorch runs
# (traces/framework_reference.py), the tokens/s ratio, and the measured-trace matrix on the CUDA backend.
# usage: scripts/device-check.sh [all|tests|bench|calibrate|train|remeasure|frameworks|throughput|measure|measure-large]...
#        (default: all, in that order: what no GPU session has measured yet comes first)
# Each part runs even when an earlier one fails; the exit status is the first failure's.
# DEVICE_DEADLINE=SECONDS (default 0: none) bounds the whole script: every command gets at most its own
# cap and what is left of the deadline, and a part that would start with under 10 s left is skipped
# (named in skipped.txt), so a device session always ends with its outputs written.
# FRAMEWORK_ONLY=REGEX runs only the framework configs whose name matches (traces/framework_reference.py --list);
# FRAMEWORK_BUDGET=SECONDS (default 240) bounds the framework matrix.
# REMEASURE='MODEL:REGEX ...' (default: the configs traces/measured/*/superseded/ waits for) re-records those
# configs of the measured matrix on the CUDA backend; it runs while DeepSpeed installs.
# Outputs: the device tool brings back only a few files of $OUT, so everything is written to a scratch
# folder and archived, on any exit, as $OUT/device-check.tar.gz (without $OUT: device-out/, unarchived).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
runtime=${DEVICE_RUNTIME:-.devrt}
if [ -n "${OUT:-}" ]; then
  out=$(mktemp -d "${TMPDIR:-/tmp}/device-check.XXXXXX")
  trap 'tar -czf "$OUT/device-check.tar.gz" -C "$out" . && echo "device-check: archived as $OUT/device-check.tar.gz"' EXIT
else
  out=device-out
fi
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

deadline=${DEVICE_DEADLINE:-0}
started=$SECONDS
left() { if [ "$deadline" -gt 0 ]; then echo $((deadline - (SECONDS - started))); else echo 100000; fi; }

run() {  # [--cap SECONDS] name command...: runs, keeps the output in $out/name.txt, remembers the first failure
  local cap=100000
  if [ "$1" = --cap ]; then cap=$2; shift 2; fi
  local name=$1 limit
  shift
  limit=$(left)
  [ "$cap" -lt "$limit" ] && limit=$cap
  if [ "$(left)" -lt 10 ]; then echo "$name: not run, $(left) s of the deadline left" | tee -a "$out/skipped.txt"; return; fi
  echo "== $name (at $((SECONDS - started)) s, limit $limit s): $*"
  local begun=$SECONDS
  timeout --kill-after=5 "$limit" "$@" >"$out/$name.txt" 2>&1
  local rc=$?
  echo "$name exit $rc after $((SECONDS - begun)) s" >>"$out/times.txt"
  tail -n 5 "$out/$name.txt"
  [ $rc -ne 124 ] || echo "$name: timed out after $limit s" >>"$out/skipped.txt"
  [ $rc -eq 0 ] || { echo "== $name failed (exit $rc)"; [ $status -ne 0 ] || status=$rc; }
}

wants() { [[ " ${parts[*]} " == *" all "* || " ${parts[*]} " == *" $1 "* ]]; }

if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/gpu.txt" 2>&1
else
  echo "no nvidia-smi on this machine" >"$out/gpu.txt"
fi
cat "$out/gpu.txt"
torch_python=${TORCH_PYTHON:-/opt/torch/.venv/bin/python}
export PATH="$PATH:$(dirname "$torch_python")"  # a python3 for the summaries if the machine has none
if wants frameworks; then  # DeepSpeed installs on the CPU while the GPU parts run; .whl: scripts/device-wheels.sh
  DS_BUILD_OPS=0 timeout 240 "$torch_python" -m pip install --no-index --find-links .whl deepspeed \
    >"$out/deepspeed-install.txt" 2>&1 &
  install_pid=$!
fi
if wants tests; then
  run --cap 45 cuda-kernel-tests "$bin/zerolens_cuda_kernel_tests"
  run --cap 45 exec-cuda-tests "$bin/zerolens_exec_cuda_tests"
  run --cap 30 exec-backend-tests "$bin/zerolens_exec_backend_tests"
  run --cap 60 exec-cuda-mpi-np1 mpirun -np 1 "$bin/zerolens_exec_cuda_mpi_tests"
  run --cap 150 exec-cuda-mpi-np2 mpirun -np 2 "$bin/zerolens_exec_cuda_mpi_tests"  # staged: two ranks, one GPU
fi
if wants bench; then
  run --cap 45 cuda-benchmarks "$bin/zerolens_cuda_benchmarks" --benchmark_out="$out/cuda-benchmarks.json" \
    --benchmark_out_format=json
fi
if wants calibrate; then
  run --cap 40 calibrate-cuda "$bin/zerolens" calibrate --device cuda --quick --report "$out/calibrate.report.json" \
    -o "$out/calibrated-cluster.json"
fi
if wants train; then  # the same run on both backends: the losses should agree (bf16: within 2%)
  small=(--steps 20 --stage 2 --precision bf16 --log-every 1)
  run --cap 20 train-cpu "$bin/zerolens" run "${small[@]}"
  run --cap 20 train-cuda "$bin/zerolens" run --device cuda "${small[@]}"
  run --cap 20 validate-cuda "$bin/zerolens" validate --device cuda --steps 5 --stage 3 --log-every 0 \
    --measured-trace "$out/validate-cuda.measured.json"
fi
measure_args=(--zerolens "$bin/zerolens" --mpirun "$bin/mpirun" --validate-args "--device cuda" --torch none)
if wants remeasure; then  # what a change in sim or the executor set aside (superseded/README.md)
  for entry in ${REMEASURE:-gpt2-124m:^zero2-bf16-np2\$}; do
    run --cap 60 "remeasure-${entry%%:*}" traces/measure.sh "${measure_args[@]}" --out "$out/measured" \
      --model "${entry%%:*}" --only "${entry#*:}"
  done
fi
if wants frameworks; then  # real DeepSpeed, FSDP2 and PyTorch: traces/framework_reference.py
  wait "$install_pid"
  echo "deepspeed install exit $?" >>"$out/deepspeed-install.txt"
  framework_budget=${FRAMEWORK_BUDGET:-240}
  budget=$(left); [ "$budget" -gt "$framework_budget" ] && budget=$framework_budget
  only=(); [ -n "${FRAMEWORK_ONLY:-}" ] && only=("--only=$FRAMEWORK_ONLY")
  DS_ACCELERATOR=cuda run --cap $((budget + 5)) frameworks "$torch_python" traces/framework_reference.py --matrix \
    --out "$out/frameworks" --deadline "$((budget - 5))" --per-run-timeout 60 "${only[@]}"
fi
if wants throughput; then  # issue 6's benchmark: GPT-2 124M tokens/s, zerolens over PyTorch (target 0.9)
  shape=(--seq-len 1024 --micro-batch 4 --precision bf16 --steps 10)
  run --cap 45 zerolens-124m "$bin/zerolens" run --device cuda --model gpt2-124m "${shape[@]}" --log-every 1 \
    --measured-trace "$out/zerolens-124m.measured.json"
  run --cap 30 torch-124m "$torch_python" traces/torch_reference.py --preset gpt2-124m \
    "${shape[@]}" --mode plain -o "$out/torch-124m.json"
  run --cap 5 throughput-ratio "$torch_python" scripts/throughput-ratio.py "$out/zerolens-124m.measured.json" \
    "$out/torch-124m.json"
fi
if wants measure; then
  run --cap 90 measure traces/measure.sh "${measure_args[@]}" --out "$out/measured"
fi
if wants measure-large; then  # the same matrix on GPT-2 124M and 355M, the configs one GPU holds first
  run --cap 90 measure-124m traces/measure.sh "${measure_args[@]}" --out "$out/measured" --model gpt2-124m \
    --only '^(dp-bf16-np1|zero3-optcpu-paramcpu-bf16-np1|zero2-bf16-np2|zero3-bf16-np2|zero2-fp32-np2|zero3-ckpt-ga2-bf16-np4)$'
  run --cap 60 measure-355m traces/measure.sh "${measure_args[@]}" --out "$out/measured" --model gpt2-355m \
    --only '^(dp-bf16-np1|zero3-bf16-np2)$'
fi
echo "device-check: outputs in $out after $((SECONDS - started)) s (exit $status)" | tee -a "$out/times.txt"
exit $status
