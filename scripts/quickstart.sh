#!/usr/bin/env bash
# Quick start: install what is missing, build, and plan GPT-2 1.5B on 8 x A100-40GB with ZeRO-2.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/release/cli/zerolens plan --model gpt2-1.5b --cluster dgx-a100-40gb --gpus 8 --stage 2 --micro-batch 4 "$@"
