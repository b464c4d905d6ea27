#!/usr/bin/env bash
# Quick start: install what is missing, build, and compare DP / ZeRO-1/2/3 / offload for GPT-2 1.5B on 8 x A100-40GB.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/release/cli/zerolens plan --model gpt2-1.5b --cluster dgx-a100-40gb --gpus 8 --precision fp16 \
  --micro-batch 4 --activation-checkpointing true --compare "$@"
