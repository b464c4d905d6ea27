#!/usr/bin/env bash
# Renders the GUI screenshots in docs/gui/ with zerolens-gui's headless command (no display needed).
# Usage: scripts/gui-screenshots.sh [path/to/zerolens-gui]   (default build/release/gui/zerolens-gui)
set -euo pipefail
cd "$(dirname "$0")/.."
gui=${1:-build/release/gui/zerolens-gui}
out=docs/gui
size=1400x880
shot() {  # name, then zerolens-gui options
  local name=$1
  shift
  "$gui" --size "$size" --screenshot "$out/$name.png" "$@"
}
# The 4-GPU ZeRO-3 walkthrough: a layer's parameters gathered from their owners, gradients
# reduce-scattered to their owners, then each view.
shot walkthrough-ranks-gather --walkthrough --view ranks --step 4
shot walkthrough-ranks-reduce --walkthrough --view ranks --step 31
for view in timeline memory traffic compare; do
  shot "walkthrough-$view" --walkthrough --view "$view" --step 4
done
# GPT-2 1.5B on 8 x A100-40GB, ZeRO-3 with the optimizer on the CPU.
real=(--model gpt2-1.5b --cluster dgx-a100-40gb --gpus 8 --stage 3 --offload-optimizer cpu --precision fp16
      --micro-batch 4 --activation-checkpointing true)
shot gpt2-1.5b-ranks-gather "${real[@]}" --view ranks --step 101
shot gpt2-1.5b-ranks-offload "${real[@]}" --view ranks --step 206
for view in timeline memory traffic compare; do
  shot "gpt2-1.5b-$view" "${real[@]}" --view "$view" --step 206
done
