#!/usr/bin/env bash
# Replays issue 19's faults against a built zerolens and prints a table: fault, expected, outcome.
# Usage: scripts/fault-check.sh [BUILD_DIR]   (default build/nocuda; needs cli/zerolens there, and
# mpirun for the multi-rank faults, which are skipped without it). Exit 1 when any fault is not
# handled as expected.
set -u
cd "$(dirname "$0")/.."
build=${1:-build/nocuda}
zl=$(realpath -e "$build/cli/zerolens" 2>/dev/null) || { echo "no $build/cli/zerolens: build first" >&2; exit 2; }
work=$(mktemp -d /tmp/zerolens-fault-XXXXXX)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
  OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
rows=() failures=0

# record FAULT EXPECTED OK(0/1) DETAIL
record() {
  local verdict=ok
  [ "$3" = 0 ] || { verdict=FAILED; failures=$((failures + 1)); }
  rows+=("$1|$2|$verdict: $4")
}

# expect_exit FAULT CODE MESSAGE -- COMMAND...: the command (at most 60 s) exits CODE and prints MESSAGE.
expect_exit() {
  local fault=$1 code=$2 message=$3; shift 4
  local output rc
  output=$(timeout 60 "$@" 2>&1); rc=$?
  local ok=0 detail="exit $rc"
  [ "$rc" = "$code" ] || ok=1
  if [ -n "$message" ] && ! grep -qF -- "$message" <<<"$output"; then ok=1; detail+=", message missing"; fi
  [ "$rc" = 124 ] && detail="hung (killed after 60 s)"
  local shown; shown=$( (grep -m1 -F -- "${message:-error}" <<<"$output" || head -n1 <<<"$output") | head -c 110)
  record "$fault" "exit $code, '$message'" $ok "$detail; $shown"
}

one_rank_offload=(run --model gpt2-tiny --stage 3 --offload-optimizer nvme --offload-param nvme --precision bf16
  --gpus 1 --steps 3 --seq-len 32 --micro-batch 2)

cluster_faults() {
  "$zl" presets --cluster-json dgx-h100 >"$work/cluster.json"
  python3 - "$work" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/cluster.json"))
d["node"]["intra_node"]["bandwidth"] = 1e-300
json.dump(d, open(sys.argv[1] + "/slow.json", "w"))
d = json.load(open(sys.argv[1] + "/cluster.json")); d["version"] = 2
json.dump(d, open(sys.argv[1] + "/v2.json", "w"))
PY
  expect_exit "5 cluster bandwidth 1e-300" 2 "node.intra_node.bandwidth" -- "$zl" sweep --cluster "$work/slow.json"
  expect_exit "cluster version 2" 2 "unsupported cluster format version 2" -- "$zl" plan --cluster "$work/v2.json"
}

write_faults() {
  expect_exit "1 trace -o /dev/full" 2 "/dev/full" -- "$zl" trace -o /dev/full
  expect_exit "1 plan > /dev/full" 2 "standard output" -- sh -c "'$zl' plan >/dev/full"
  expect_exit "1 plan --json -o missing dir" 2 "does not exist" -- "$zl" plan --json -o "$work/no/such/dir/plan.json"
  echo previous >"$work/kept.json"
  expect_exit "1 trace -o on a full disk (RLIMIT_FSIZE 16 KiB)" 2 "cannot write" -- \
    sh -c "ulimit -f 16; trap '' XFSZ; exec '$zl' trace -o '$work/kept.json'"
  local kept; kept=$(cat "$work/kept.json")
  record "1 ... the previous file" "kept whole" "$([ "$kept" = previous ] && echo 0 || echo 1)" "'$(head -c 20 "$work/kept.json")'"
}

read_faults() {
  expect_exit "3 plan -c /dev/zero" 2 "not a regular file" -- "$zl" plan -c /dev/zero
  expect_exit "3 --cluster /dev/urandom" 2 "not a regular file" -- "$zl" plan --cluster /dev/urandom
  mkfifo "$work/fifo.json"
  expect_exit "3 plan -c FIFO (no writer)" 2 "not a regular file" -- "$zl" plan -c "$work/fifo.json"
  expect_exit "3 check-measured FIFO" 2 "not a regular file" -- "$zl" check-measured "$work/fifo.json"
  mkdir -p "$work/dir.json"
  expect_exit "directory as config" 2 "is a directory" -- "$zl" plan -c "$work/dir.json"
  printf '{"zero_optimization":{"stage":2,"stage":3}}' >"$work/dup.json"
  expect_exit "4 duplicate key" 2 "duplicate key 'zero_optimization.stage'" -- "$zl" plan -c "$work/dup.json"
  printf '{"zero_optimization":{"stage":2}}\0{"x":1}' >"$work/nul.json"
  expect_exit "4 NUL byte" 2 "NUL byte at offset" -- "$zl" plan -c "$work/nul.json"
}

small_faults() {
  printf '{"zero_optimization":{"stage":2,"offload_optimizer":{"device":"cpu","ratio":0.3}}}' >"$work/ratio.json"
  expect_exit "offload ratio at stage 2" 0 "is ignored: DeepSpeed applies it only at ZeRO-3" -- "$zl" plan -c "$work/ratio.json"
  expect_exit "plan --seq-len 4096 on GPT-2" 0 "beyond the model's 1024 learned positions" -- "$zl" plan --seq-len 4096
  expect_exit "--micro-batch 0" 2 "must be a positive integer, got '0'" -- "$zl" plan --micro-batch 0
  expect_exit "run --steps 0" 2 "--steps: must be an integer from 1" -- "$zl" run --steps 0
}

nvme_run=(run --stage 3 --precision bf16 --offload-optimizer nvme --offload-param nvme --log-every 0)

# wait_until SECONDS COMMAND...: polls COMMAND every 0.2 s.
wait_until() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -lt $deadline ] || return 1; sleep 0.2; done
}
has_swap_files() { [ -n "$(find "$1" -type f 2>/dev/null | head -n1)" ]; }

checkpoint_faults() {
  local a=$work/ckpt-a b=$work/ckpt-b
  "$zl" run --steps 2 --log-every 0 --save "$a" >/dev/null 2>&1 &&
    "$zl" run --steps 2 --log-every 0 --seed 99 --save "$b" >/dev/null 2>&1 ||
    { record "2 checkpoints to tamper with" "saved" 1 "run --save failed"; return; }
  local step; step=$(tr -d '\n' <"$a/latest")
  cp "$b/$step/rank_00000.bin" "$work/rank-from-b.bin" 2>/dev/null || cp "$(ls "$b/$step"/rank* | head -n1)" "$work/rank-from-b.bin"
  local rank_file; rank_file=$(ls "$a/$step"/rank* | head -n1)
  cp "$rank_file" "$work/rank-a.bin"
  cp "$work/rank-from-b.bin" "$rank_file"
  expect_exit "2 rank file of another run (--seed 99)" 2 "belongs to another save" -- "$zl" run --steps 3 --log-every 0 --resume "$a"
  cp "$work/rank-a.bin" "$rank_file"
  expect_exit "6 consolidate -o ckpt/latest" 2 "" -- "$zl" consolidate "$a" -o "$a/latest"
  expect_exit "6 consolidate -o a rank file" 2 "" -- "$zl" consolidate "$a" -o "$rank_file"
  expect_exit "1 consolidate -o /dev/full" 2 "/dev/full" -- "$zl" consolidate "$a" -o /dev/full
  cp -r "$a" "$work/ckpt-zero" && ln -sf /dev/zero "$work/ckpt-zero/latest"
  expect_exit "3 checkpoint latest -> /dev/zero" 2 "not a regular file" -- "$zl" run --steps 3 --log-every 0 --resume "$work/ckpt-zero"
}

signal_fault() {  # SIGNAL CODE
  local nvme=$work/nvme-$1; mkdir -p "$nvme"
  "$zl" "${nvme_run[@]}" --steps 1000000 --nvme-path "$nvme" >"$work/$1.log" 2>&1 &
  local pid=$!
  wait_until 60 has_swap_files "$nvme"; sleep 1
  kill -"$1" $pid; wait $pid; local rc=$?
  local left; left=$(find "$nvme" -mindepth 1 | wc -l)
  local ok=0; { [ $rc = "$2" ] && [ "$left" = 0 ] && grep -q "interrupted by SIG$1" "$work/$1.log"; } || ok=1
  record "7 SIG$1 during an NVMe-offload run" "exit $2, swap files removed" $ok "exit $rc, $left entries left in nvme_path"
}

stuck_rank_fault() {
  command -v mpirun >/dev/null || { record "8 a stopped rank" "watchdog aborts" 0 "skipped: no mpirun"; return; }
  local nvme=$work/nvme-stuck; mkdir -p "$nvme"
  mpirun -np 2 "$zl" "${nvme_run[@]}" --steps 1000000 --collective-timeout 2 --nvme-path "$nvme" >"$work/stuck.log" 2>&1 &
  local launcher=$!
  wait_until 60 has_swap_files "$nvme"; sleep 1
  local stopped; stopped=$(pgrep -P $launcher | sort -n | tail -n1)
  kill -STOP "$stopped"
  local start=$SECONDS
  wait_until 60 sh -c "! kill -0 $launcher 2>/dev/null"; local ended=$?
  kill -9 "$stopped" 2>/dev/null; wait $launcher 2>/dev/null
  local ok=0; { [ $ended = 0 ] && grep -q "made no progress for 2 s" "$work/stuck.log"; } || ok=1
  record "8 kill -STOP of rank 1 (--collective-timeout 2)" "aborted, naming rank and op" $ok \
    "ended after $((SECONDS - start)) s; $(grep -m1 -o 'rank [0-9]*: [^;]*' "$work/stuck.log")"
}

cluster_faults
write_faults
read_faults
small_faults
checkpoint_faults
signal_fault TERM 143
signal_fault INT 130
stuck_rank_fault

printf '%-48s | %-52s | %s\n' fault expected outcome
printf '%s\n' "$(printf -- '-%.0s' {1..150})"
for row in "${rows[@]}"; do
  IFS='|' read -r fault expected outcome <<<"$row"
  printf '%-48s | %-52s | %s\n' "$fault" "${expected:0:52}" "${outcome:0:120}"
done
echo "$(( ${#rows[@]} - failures )) of ${#rows[@]} faults handled as expected"
[ "$failures" = 0 ]
