#!/usr/bin/env bash
# Published throughput of the ZeRO papers (TFLOP/s per V100) next to zerolens's prediction for the
# same model, GPU count, ZeRO stage and offload. Sources, mappings and the discussion of every
# difference: docs/published-throughput.md.
#
# usage: scripts/published-throughput.sh [ZEROLENS_BINARY]      (default build/release/cli/zerolens)
#   ZL_TRACE_ARGS="--compute-efficiency 0.35" scripts/published-throughput.sh   # extra `zerolens trace` flags, same for every case
#   ZL_VERBOSE=1 scripts/published-throughput.sh                                 # print every zerolens command
set -euo pipefail
Z=$(realpath -m -- "${1:-$(dirname "$0")/../build/release/cli/zerolens}")   # before the cd: $1 may be relative
cd "$(dirname "$0")/.."

read -r -a EXTRA <<<"${ZL_TRACE_ARGS:-}"   # timeline flags: given to `trace` only (`plan` has no timeline)
M=docs/published

# The binary may be rebuilt while this runs: before every call, wait up to a minute for it to
# (re)appear.
zl() {
  local _
  for _ in $(seq 30); do [[ -x "$Z" ]] && break; sleep 2; done
  [[ -x "$Z" ]] || { echo "error: no zerolens binary at $Z (build it with scripts/build.sh)" >&2; exit 2; }
  "$Z" "$@"
}
zl --version >/dev/null
command -v python3 >/dev/null || { echo "error: python3 is required" >&2; exit 2; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

fits_all() {  # fits_all ARGS... -> exit 0 when the plan fits on GPU, CPU and NVMe
  zl plan "$@" --json >"$TMP/fit.json" 2>"$TMP/fit.err" || {
    echo "error: zerolens plan failed:" >&2; cat "$TMP/fit.err" >&2; exit 1; }
  python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["fits"] else 1)' "$TMP/fit.json"
}

largest_batch() {  # largest_batch ARGS... -> the largest power-of-two micro-batch <= 64 that fits (1 if none)
  local b
  for b in 64 32 16 8 4 2 1; do
    fits_all "$@" --micro-batch "$b" && { echo "$b"; return; }
  done
  echo 1
}

ROWS=()
run() {  # run CASE PUBLISHED ARGS...   (ARGS include --micro-batch)
  local name=$1 published=$2; shift 2
  [[ -z "${ZL_VERBOSE:-}" ]] || echo "+ $Z trace ${*//$TMP/\$TMP} ${EXTRA[*]}" >&2
  zl trace "$@" "${EXTRA[@]}" --ranks 1 -o "$TMP/trace.json" >/dev/null 2>"$TMP/trace.err" || {
    echo "error: zerolens trace failed for $name:" >&2; cat "$TMP/trace.err" >&2; exit 1; }
  zl plan "$@" --json >"$TMP/plan.json" 2>"$TMP/plan.err" || {
    echo "error: zerolens plan failed for $name:" >&2; cat "$TMP/plan.err" >&2; exit 1; }
  ROWS+=("$(python3 - "$name" "$published" "$TMP/trace.json" "$TMP/plan.json" <<'EOF'
import json, sys
name, published, trace, plan = sys.argv[1], float(sys.argv[2]), json.load(open(sys.argv[3])), json.load(open(sys.argv[4]))
s = trace["summary"]
model = s["model_flops_per_gpu"] / 1e12
rank = trace["ranks"][0]
compute = sum(op["flops"] for op in trace["ops"] if op["rank"] == rank and op["stream"] == "compute")
hardware = compute / s["step_time_s"] / 1e12
micro = plan["run"]["micro_batch_per_gpu"]
d = plan["devices"]
fits = "yes" if d["gpu"]["fits"] else "no"
fits += "".join(f" ({k} no)" for k in ("cpu", "nvme") if not d[k]["fits"])
def merged(spans):
    out = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        elif end > start:
            out.append([start, end])
    return out
# Any non-compute stream (collectives and offload alike, the trace's two exposed figures together)
# busy while compute idles: the union, so time both are exposed counts once.
ops = [op for op in trace["ops"] if op["rank"] == rank and op["kind"] != "recv"]
busy = merged((op["start_s"], op["start_s"] + op["duration_s"]) for op in ops if op["stream"] == "compute")
other = merged((op["start_s"], op["start_s"] + op["duration_s"]) for op in ops if op["stream"] != "compute")
covered = sum(max(0.0, min(e, be) - max(s0, bs)) for s0, e in other for bs, be in busy)
exposed = 100 * (sum(e - s0 for s0, e in other) - covered) / s["step_time_s"]
print(f"{name}\t{micro}\t{published:.1f}\t{model:.1f}\t{hardware:.1f}\t{published / model:.2f}\t{published / hardware:.2f}\t{exposed:.0f}%\t{fits}")
EOF
)")
}

C=(--cluster dgx-2 --precision fp16 --seq-len 1024)
CK=(--activation-checkpointing true)
Z2=(--stage 2 --overlap-comm true --contiguous-gradients true)
INF=(--stage 3 --partition-activations true --cpu-checkpointing true --pin-memory true --nvme-path /local_nvme)

# --- ZeRO (SC'20): ZeRO-100B = stage 2 (P_os+g) + ZeRO-R, Megatron MP 16 inside a DGX-2 -------------
A=(--model "$M/gpt-100b.json" "${C[@]}" "${CK[@]}" --attention eager --tp 16 --gpus 400 "${Z2[@]}"
   --partition-activations true)
b=$(largest_batch "${A[@]}")
run "ZeRO 100B 400gpu MP16 [TP 16 x DP 25]" 38 "${A[@]}" --micro-batch "$b"
b_dp=$(( b * 25 / 400 )); (( b_dp >= 1 )) || b_dp=1   # same global batch on 400 data-parallel ranks
run "ZeRO 100B 400gpu MP16 [pure DP ZeRO-3]" 38 --model "$M/gpt-100b.json" "${C[@]}" "${CK[@]}" --attention eager \
  --gpus 400 --stage 3 --micro-batch "$b_dp"
A=(--model "$M/gpt-13b.json" "${C[@]}" "${CK[@]}" --attention eager --gpus 128 "${Z2[@]}")
run "ZeRO 13B 128gpu no MP" 40 "${A[@]}" --micro-batch "$(largest_batch "${A[@]}")"

# --- ZeRO-Offload (ATC'21): stage 2 + optimizer on the CPU ---------------------------------------------
run "Offload 10B 1gpu" 40 --model "$M/gpt-10b.json" "${C[@]}" "${CK[@]}" --attention eager --gpus 1 "${Z2[@]}" \
  --offload-optimizer cpu --pin-memory true --micro-batch 10
A=(--model dense:1.4e9 "${C[@]}" "${CK[@]}" --attention eager --gpus 1 --stage 0)
run "Offload baseline PyTorch 1.4B 1gpu" 30 "${A[@]}" --micro-batch "$(largest_batch "${A[@]}")"
run "Offload 10B 128gpu" 30 --model "$M/gpt-10b.json" "${C[@]}" "${CK[@]}" --attention eager --gpus 128 "${Z2[@]}" \
  --offload-optimizer cpu --pin-memory true --micro-batch 10

# --- ZeRO-Infinity (SC'21): stage 3 + CPU/NVMe offload --------------------------------------------------
A=(--model "$M/gpt-10b.json" "${C[@]}" "${CK[@]}" --attention eager --gpus 16 "${INF[@]}")
run "Infinity 10B 16gpu" 40 "${A[@]}" --micro-batch "$(largest_batch "${A[@]}")"
A=(--model "$M/gpt-100b.json" "${C[@]}" "${CK[@]}" --attention eager --gpus 16 "${INF[@]}" --offload-param cpu \
   --offload-optimizer nvme)
run "Infinity 100B 16gpu" 40 "${A[@]}" --micro-batch "$(largest_batch "${A[@]}")"

A=(--model "$M/gpt-1t.json" "${C[@]}" "${CK[@]}" --attention eager --tp 4 --gpus 512 "${INF[@]}"
   --offload-optimizer cpu)
b=$(largest_batch "${A[@]}")
run "Infinity 1T 512gpu MP4 [TP 4 x DP 128]" 49 "${A[@]}" --micro-batch "$b"
b_dp=$(( b * 128 / 512 )); (( b_dp >= 1 )) || b_dp=1
run "Infinity 1T 512gpu [pure DP ZeRO-3]" 49 --model "$M/gpt-1t.json" "${C[@]}" "${CK[@]}" --attention eager --gpus 512 \
  "${INF[@]}" --offload-optimizer cpu --micro-batch "$b_dp"

run "Infinity 20T 512gpu MP8 [TP 8 x DP 64]" 34 --model "$M/gpt-20t.json" "${C[@]}" "${CK[@]}" --attention eager \
  --tp 8 --gpus 512 "${INF[@]}" --offload-param nvme --offload-optimizer nvme --micro-batch 10
run "Infinity 20T 512gpu [pure DP ZeRO-3]" 34 --model "$M/gpt-20t.json" "${C[@]}" "${CK[@]}" --attention eager --gpus 512 \
  "${INF[@]}" --offload-param nvme --offload-optimizer nvme --micro-batch 1

# --- table ---------------------------------------------------------------------------------------------
echo "Published TFLOP/s per V100 (ZeRO papers) vs $(zl --version 2>/dev/null | head -1)${ZL_TRACE_ARGS:+, trace flags: $ZL_TRACE_ARGS}"
echo "pred model = 3 x forward FLOPs (no recompute); pred hw = with recompute; ratio = published / predicted;"
echo "exposed = share of the predicted step in which only non-compute streams (network, PCIe, NVMe, CPU Adam) are busy"
printf '%s\n' "${ROWS[@]}" | python3 -c '
import sys
head = ["case", "micro", "published", "pred model", "pred hw", "pub/model", "pub/hw", "exposed", "fits (GPU)"]
rows = [head] + [l.rstrip("\n").split("\t") for l in sys.stdin if l.strip()]
w = [max(len(r[i]) for r in rows) for i in range(len(head))]
for n, r in enumerate(rows):
    print("  ".join(c.ljust(w[i]) if i in (0, 8) else c.rjust(w[i]) for i, c in enumerate(r)).rstrip())
    if n == 0: print("-" * (sum(w) + 2 * (len(w) - 1)))
'
