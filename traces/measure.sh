#!/usr/bin/env bash
# Records measured traces of a matrix of configs (DP, ZeRO-1/2/3, CPU and NVMe offload, TP 2 with
# SP, PP 2, 1/2/4 ranks, bf16 and fp32) with `zerolens validate` under mpirun, and a summary table, under
# traces/measured/<device-name>/. Committed, they are re-checked on every CI run against the
# simulator's current predictions (ctest traces.measured: `zerolens check-measured`).
# See traces/measured/README.md.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: traces/measure.sh [options]

Runs every config of the matrix through `mpirun -np N zerolens validate`, writes
<model>-<config>.measured.json and .predicted.json (trace schema, traces/README.md), the validate
output under logs/, and SUMMARY.md (predicted vs measured, from `zerolens check-measured --json`)
into OUT. Exit 1 when a config is outside its tolerance, 2 on bad arguments or a failed run.

options (environment variable in brackets):
  --zerolens PATH      zerolens binary [ZEROLENS]; default: build/release/cli/zerolens, else .devrt/bin/zerolens
  --mpirun PATH        MPI launcher [MPIRUN]; default: mpirun beside --zerolens if there, else mpirun on PATH
  --device-name NAME   directory name under traces/measured [DEVICE_NAME]; default: derived, the GPU's name
                       from nvidia-smi (nvidia-h100-80gb-hbm3), else cpu-<CPU model> (cpu-amd-epyc)
  --out DIR            output directory; default: traces/measured/<device-name>
  --nvme-dir DIR       directory for the NVMe offload files [NVME_DIR]; default: a new temporary directory
  --steps N            optimizer steps per config (default 4); the step time recorded is the lowest
                       mean of 8 consecutive steps (all but the first when fewer ran)
  --rounds N           run the matrix N times and keep, per config, the round with the lowest
                       step time (default 1): on a shared host whose speed varies, rounds minutes
                       apart catch each config at the machine's own speed; every round's
                       measured and predicted step time go to OUT/rounds.tsv and the summary
  --calibrate PASSES   before every round run `zerolens calibrate --passes PASSES` on as many ranks
                       as the matrix's largest config and predict that round's configs on it: the
                       step time is then compared (15 %). A kept run's trace carries the cluster
                       it was predicted on; OUT/cluster.json and OUT/calibration.json (the report)
                       are the first round's, OUT/calibration-round-N.json each round's report.
                       On a host whose speed drifts (a shared virtual machine), a calibration
                       minutes before the runs it predicts compares like with like
  --model NAME         model of every config (default gpt2-tiny; gpt2-124m fits a GPU)
  --only REGEX         run only the configs whose name matches (keeps the other files in OUT)
  --validate-args STR  extra arguments for every validate run (e.g. a device backend flag)
  --tolerance-args STR tolerance flags for validate and the summary's check (default: none, the
                       defaults ctest traces.measured holds the committed traces to)
  --torch PYTHON       Python with PyTorch and CUDA for traces/torch_reference.py [TORCH_PYTHON];
                       default: /opt/torch/.venv/bin/python when it sees a GPU; "none" skips it
  --list               print the matrix and exit
  -h, --help           this help
EOF
}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
ZEROLENS=${ZEROLENS:-}
MPIRUN=${MPIRUN:-}
DEVICE_NAME=${DEVICE_NAME:-}
NVME_DIR=${NVME_DIR:-}
TORCH_PYTHON=${TORCH_PYTHON:-auto}
out=""
steps=4
rounds=1
calibrate_passes=""
model=gpt2-tiny
only=""
validate_args=""
tolerance_args=""
list=0

die() { echo "measure.sh: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --zerolens) ZEROLENS=${2:?--zerolens needs a path}; shift 2 ;;
    --mpirun) MPIRUN=${2:?--mpirun needs a path}; shift 2 ;;
    --device-name) DEVICE_NAME=${2:?--device-name needs a name}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --nvme-dir) NVME_DIR=${2:?--nvme-dir needs a directory}; shift 2 ;;
    --steps) steps=${2:?--steps needs a number}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
    --calibrate) calibrate_passes=${2:?--calibrate needs a number of passes}; shift 2 ;;
    --model) model=${2:?--model needs a name}; shift 2 ;;
    --only) only=${2:?--only needs a regex}; shift 2 ;;
    --validate-args) validate_args=${2?}; shift 2 ;;
    --tolerance-args) tolerance_args=${2?}; shift 2 ;;
    --torch) TORCH_PYTHON=${2:?--torch needs a python or none}; shift 2 ;;
    --list) list=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || die "--steps: '$steps' is not a positive number"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "--rounds: '$rounds' is not a positive number"

# name ranks flags (validate's defaults otherwise: micro-batch 4, sequence 64). The 1-rank DP and ZeRO-3 CPU-offload
# configs are the ones torch_reference.py's plain and FSDP-offload runs stand beside.
matrix() {
  local nvme="--nvme-path $NVME_DIR --sub-group-size 30000"
  cat <<EOF
dp-bf16-np1 1 --precision bf16 --stage 0
zero3-optcpu-paramcpu-bf16-np1 1 --precision bf16 --stage 3 --offload-optimizer cpu --offload-param cpu
dp-bf16-np2 2 --precision bf16 --stage 0
zero1-bf16-np2 2 --precision bf16 --stage 1
zero2-bf16-np2 2 --precision bf16 --stage 2
zero3-bf16-np2 2 --precision bf16 --stage 3
zero2-fp32-np2 2 --precision fp32 --stage 2
zero2-optcpu-bf16-np2 2 --precision bf16 --stage 2 --offload-optimizer cpu
zero3-optcpu-bf16-np2 2 --precision bf16 --stage 3 --offload-optimizer cpu
zero3-optcpu-paramcpu-bf16-np2 2 --precision bf16 --stage 3 --offload-optimizer cpu --offload-param cpu
zero3-optnvme-bf16-np2 2 --precision bf16 --stage 3 --offload-optimizer nvme $nvme
zero3-optnvme-paramnvme-bf16-np2 2 --precision bf16 --stage 3 --offload-optimizer nvme --offload-param nvme $nvme --set zero_optimization.offload_param.buffer_size=20000
dp-bf16-np4 4 --precision bf16 --stage 0
zero1-bf16-np4 4 --precision bf16 --stage 1
zero2-bf16-np4 4 --precision bf16 --stage 2
zero3-ckpt-ga2-bf16-np4 4 --precision bf16 --stage 3 --activation-checkpointing true --grad-accum 2
zero3-optcpu-paramcpu-ga2-bf16-np4 4 --precision bf16 --stage 3 --offload-optimizer cpu --offload-param cpu --grad-accum 2
zero3-optnvme-paramnvme-bf16-np4 4 --precision bf16 --stage 3 --offload-optimizer nvme --offload-param nvme $nvme --set zero_optimization.offload_param.buffer_size=20000
tp2-sp-zero1-ga2-bf16-np4 4 --precision bf16 --stage 1 --tp 2 --sp true --grad-accum 2
pp2-zero1-ga4-bf16-np4 4 --precision bf16 --stage 1 --pp 2 --grad-accum 4
EOF
}

slug() { tr '[:upper:]' '[:lower:]' | sed -E 's/\((r|tm)\)//g; s/[^a-z0-9]+/-/g; s/^-+|-+$//g'; }

derive_device_name() {
  local gpu=""
  if command -v nvidia-smi >/dev/null 2>&1; then
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)
  fi
  if [[ -n "$gpu" ]]; then
    printf '%s' "$gpu" | slug
  else
    printf 'cpu-%s' "$(grep -m 1 'model name' /proc/cpuinfo | cut -d: -f2- | slug)"
  fi
}

find_zerolens() {
  [[ -n "$ZEROLENS" ]] && return
  for candidate in "$repo/build/release/cli/zerolens" "$repo/.devrt/bin/zerolens"; do
    if [[ -x "$candidate" ]]; then ZEROLENS=$candidate; return; fi
  done
  die "no zerolens binary: build it (scripts/test.sh) or pass --zerolens PATH"
}

find_mpirun() {
  [[ -n "$MPIRUN" ]] && return
  if [[ -x "$(dirname "$ZEROLENS")/mpirun" ]]; then MPIRUN=$(dirname "$ZEROLENS")/mpirun; else MPIRUN=mpirun; fi
}

describe_commit() {
  local commit
  commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null) || { echo "(not a git checkout)"; return; }
  # The recorded traces themselves do not count as changes to the code that measured them.
  git -C "$repo" diff --quiet HEAD -- . ':(exclude)traces/measured' 2>/dev/null && echo "$commit" ||
    echo "$commit with uncommitted changes"
}

# As ctest runs the MPI tests: root allowed, no cross-memory attach, oversubscribed, one thread.
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}

scratch=$(mktemp -d "${TMPDIR:-/tmp}/zerolens-measure.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
if [[ -z "$NVME_DIR" ]]; then NVME_DIR="$scratch/nvme"; mkdir -p "$NVME_DIR"; fi

if [[ $list -eq 1 ]]; then matrix; exit 0; fi
find_zerolens
find_mpirun
[[ -x "$ZEROLENS" ]] || die "--zerolens: '$ZEROLENS' is not executable"
command -v "$MPIRUN" >/dev/null 2>&1 || die "--mpirun: '$MPIRUN' not found"
[[ -d "$NVME_DIR" && -w "$NVME_DIR" ]] || die "--nvme-dir: '$NVME_DIR' is not a writable directory"
[[ -n "$DEVICE_NAME" ]] || DEVICE_NAME=$(derive_device_name)
[[ "$DEVICE_NAME" =~ ^[a-z0-9][a-z0-9._-]*$ ]] || die "--device-name: '$DEVICE_NAME' (use a-z, 0-9, '.', '_', '-')"
out=${out:-$repo/traces/measured/$DEVICE_NAME}
mkdir -p "$out/logs"
# Files are named <model>-<config>; a whole run replaces its model's files.
if [[ -z "$only" ]]; then rm -f "$out/$model"-*.measured.json "$out/$model"-*.predicted.json "$out/logs/$model"-*.txt; fi

# Runs one config into directory $1; its exit status is validate's (1: outside tolerance).
measure() {
  local dir=$1 name=$2 ranks=$3
  shift 3
  mkdir -p "$dir/logs"
  # shellcheck disable=SC2086 # the argument strings are split on purpose
  "$MPIRUN" -np "$ranks" "$ZEROLENS" validate --model "$model" --steps "$steps" --log-every 1 "$@" $round_args \
    $tolerance_args \
    --measured-trace "$dir/$name.measured.json" --predicted-trace "$dir/$name.predicted.json" \
    </dev/null >"$dir/logs/$name.txt" 2>&1
}

step_time() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["summary"]["step_time_s"])' "$1"; }

# Every round's run of a config: name, round, measured and predicted step time (seconds).
note_round() {
  local dir=$1 name=$2 round=$3
  printf '%s\t%s\t%s\t%s\n' "$name" "$round" "$(step_time "$dir/$name.measured.json")" \
    "$(step_time "$dir/$name.predicted.json")" >>"$scratch/rounds.tsv"
}

# With rounds, a round's run replaces the kept one when its step time is lower.
keep_faster() {
  local from=$1 name=$2
  if [[ -f "$out/$name.measured.json" ]] &&
     python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)' \
       "$(step_time "$out/$name.measured.json")" "$(step_time "$from/$name.measured.json")"; then
    return
  fi
  mv "$from/$name.measured.json" "$from/$name.predicted.json" "$out/"
  mv "$from/logs/$name.txt" "$out/logs/"
}

if [[ -n "$calibrate_passes" ]]; then
  [[ "$calibrate_passes" =~ ^[1-9][0-9]*$ ]] || die "--calibrate: '$calibrate_passes' is not a positive number"
  most=$(matrix | awk '$2 > n {n = $2} END {print n}')
  rm -f "$out"/calibration-round-*.json "$out"/logs/calibrate-round-*.txt
fi

# Calibrates the machine for round $1 into $2 (a cluster JSON): the round's configs are predicted
# on it. The first round's is also OUT/cluster.json and OUT/calibration.json.
calibrate_round() {
  local round=$1 cluster=$2 log="$out/logs/calibrate-round-$1.txt"
  echo "calibrating on $most ranks ($calibrate_passes passes) ..."
  "$MPIRUN" -np "$most" "$ZEROLENS" calibrate --passes "$calibrate_passes" --nvme-path "$NVME_DIR" \
    --name "calibrated-$DEVICE_NAME" -o "$cluster" --report "$out/calibration-round-$round.json" \
    </dev/null >"$log" 2>&1 || die "calibrate failed ($log)"
  grep -h 'reference step' "$log" || true
  if [[ $round -eq 1 ]]; then
    cp "$cluster" "$out/cluster.json"
    cp "$out/calibration-round-$round.json" "$out/calibration.json"
    cp "$log" "$out/logs/calibrate.txt"
  fi
}

failed=()
broken=()
started=$SECONDS
for ((round = 1; round <= rounds; ++round)); do
  [[ $rounds -gt 1 ]] && echo "round $round of $rounds"
  dir=$out
  [[ $rounds -gt 1 ]] && dir=$scratch/round
  round_args=$validate_args
  if [[ -n "$calibrate_passes" ]]; then
    mkdir -p "$scratch/clusters"
    calibrate_round "$round" "$scratch/clusters/round-$round.json"
    round_args="$validate_args --cluster $scratch/clusters/round-$round.json"
  fi
  while read -r name ranks flags; do
    [[ -n "$only" && ! "$name" =~ $only ]] && continue
    printf '%-45s np %s ... ' "$model-$name" "$ranks"
    rc=0
    # shellcheck disable=SC2086 # flags are split on purpose
    measure "$dir" "$model-$name" "$ranks" $flags || rc=$?
    case $rc in
      0|1) [[ $rc -eq 0 ]] && echo "ok" || echo "outside tolerance ($dir/logs/$model-$name.txt)"
           note_round "$dir" "$model-$name" "$round"
           if [[ $rounds -gt 1 ]]; then keep_faster "$dir" "$model-$name"
           elif [[ $rc -eq 1 ]]; then failed+=("$name"); fi ;;
      *) echo "FAILED with exit $rc ($dir/logs/$model-$name.txt)"; broken+=("$name")
         rm -f "$dir/$model-$name.measured.json" ;;
    esac
  done < <(matrix)
done
echo "matrix took $((SECONDS - started)) s"
# This recording's rounds replace the earlier rows of the configs it ran (--only keeps the others).
python3 - "$out/rounds.tsv" "$scratch/rounds.tsv" <<'PY'
import os, sys
kept, new = sys.argv[1], sys.argv[2]
rows = open(new).read().splitlines() if os.path.exists(new) else []
ran = {row.split("\t")[0] for row in rows}
old = open(kept).read().splitlines() if os.path.exists(kept) else []
rows = [row for row in old if row and row.split("\t")[0] not in ran] + rows
with open(kept, "w") as f:
    f.write("".join(row + "\n" for row in sorted(rows, key=lambda r: (r.split("\t")[0], int(r.split("\t")[1])))))
PY

torch_json=""
if [[ "$TORCH_PYTHON" == auto ]]; then
  TORCH_PYTHON=none
  if [[ -x /opt/torch/.venv/bin/python ]] &&
     /opt/torch/.venv/bin/python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    TORCH_PYTHON=/opt/torch/.venv/bin/python
  fi
fi
if [[ "$TORCH_PYTHON" != none ]]; then
  echo "PyTorch reference ($TORCH_PYTHON) ..."
  if "$TORCH_PYTHON" "$here/torch_reference.py" --preset "$model" --micro-batch 4 --seq-len 64 --precision bf16 \
       --steps 20 -o "$out/torch_reference.json" >"$out/logs/torch_reference.txt" 2>&1; then
    torch_json="$out/torch_reference.json"
  else
    echo "torch_reference.py failed (logs/torch_reference.txt)"; broken+=(torch_reference)
  fi
elif [[ -f "$out/torch_reference.json" ]]; then
  torch_json="$out/torch_reference.json"  # from an earlier run on this device
fi

# The table is made from check-measured's JSON: the very comparison CI runs.
check_rc=0
# shellcheck disable=SC2086 # split on purpose
"$ZEROLENS" check-measured $tolerance_args --json "$out" -o "$scratch/check.json" || check_rc=$?
[[ $check_rc -le 1 ]] || die "check-measured failed with exit $check_rc"
summary_args=(--check "$scratch/check.json" --out "$out/SUMMARY.md" --device-name "$DEVICE_NAME"
              --base "$out" --steps "$steps" --rounds "$rounds" --rounds-file "$out/rounds.tsv"
              --machine "$(uname -srm), $(getconf _NPROCESSORS_ONLN) cores, $(grep -m 1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
              --mpi "$("$MPIRUN" --version 2>/dev/null | head -n 1)"
              --commit "$(describe_commit)")
[[ -n "$torch_json" ]] && summary_args+=(--torch "$torch_json")
python3 "$here/measure_summary.py" "${summary_args[@]}"
echo "wrote $out (SUMMARY.md, $(find "$out" -name '*.measured.json' | wc -l) measured traces, $(du -sh "$out" | cut -f1))"

[[ ${#broken[@]} -eq 0 ]] || { echo "failed runs: ${broken[*]}" >&2; exit 2; }
# The summary's check names what is outside (with rounds, the kept runs are only judged there).
outside=$(python3 -c 'import json, os, sys
print(" ".join(os.path.basename(t["file"]).removesuffix(".measured.json")
               for t in json.load(open(sys.argv[1]))["traces"] if not t["passed"]))' "$scratch/check.json" 2>/dev/null || true)
[[ ${#failed[@]} -eq 0 && $check_rc -eq 0 ]] || { echo "outside tolerance: ${outside:-${failed[*]}} (SUMMARY.md)" >&2; exit 1; }
