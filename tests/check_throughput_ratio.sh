#!/usr/bin/env bash
# scripts/throughput-ratio.py against a torch reference made to run at twice the committed measured
# trace's tokens/s (ratio 0.500), one with another batch shape (exit 2), and a file that is not a
# trace (exit 2).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
trace="$repo/traces/measured/cpu-amd-epyc/gpt2-tiny-dp-bf16-np1.measured.json"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
python3 - "$trace" "$scratch" <<'PY'
import json, sys
trace = json.load(open(sys.argv[1]))
run, rate = trace["run"], trace["summary"]["tokens_per_s"]
same = {"micro_batch": run["micro_batch"], "seq_len": run["seq_len"], "runs": {"plain": {"tokens_per_s": 2 * rate}}}
json.dump(same, open(sys.argv[2] + "/torch.json", "w"))
json.dump(dict(same, seq_len=run["seq_len"] * 2), open(sys.argv[2] + "/other.json", "w"))
PY
out=$(python3 "$repo/scripts/throughput-ratio.py" "$trace" "$scratch/torch.json")
echo "$out"
[[ "$out" == *"ratio 0.500 (target 0.9: not met)"* ]]
if python3 "$repo/scripts/throughput-ratio.py" "$trace" "$scratch/other.json"; then exit 1; else [ $? -eq 2 ]; fi
if python3 "$repo/scripts/throughput-ratio.py" "$scratch/torch.json" "$scratch/torch.json"; then exit 1; else [ $? -eq 2 ]; fi
echo "throughput-ratio: ok"
