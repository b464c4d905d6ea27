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
# The seed systems (docs/seeds.md). ColossalAI's BucketTensorShardStrategy gathering a module's
# weight and bias at once, and its placements x strategies side by side, on the walkthrough.
shot colossalai-walkthrough-bucket-gather --walkthrough --framework colossalai --shard-strategy bucket-tensor \
  --view ranks --step 6
shot colossalai-walkthrough-compare --walkthrough --framework colossalai --view compare --step 4
# Gemini (placement auto) keeping LLaMA-2 13B on one A100-80GB: shards evicted before the backward
# (op 461) and fetched back as the backward reaches their layers.
gemini=(--model llama2-13b --cluster dgx-a100-80gb --gpus 1 --placement auto --micro-batch 27 --seq-len 2048
        --activation-checkpointing true)
shot gemini-llama2-13b-ranks-evict "${gemini[@]}" --view ranks --step 461
shot gemini-llama2-13b-timeline "${gemini[@]}" --view timeline --step 461
# ZeRO-Offload's delayed parameter update: the CPU step of the previous step beside the forward
# and backward, and the same step without it.
dpu=(--model gpt2-1.5b --cluster dgx-a100-40gb --gpus 8 --stage 2 --offload-optimizer cpu --precision fp16
     --micro-batch 4 --activation-checkpointing true)
shot dpu-gpt2-1.5b-timeline "${dpu[@]}" --delayed-param-update true --view timeline --step 1
shot dpu-gpt2-1.5b-serial-timeline "${dpu[@]}" --delayed-param-update false --view timeline --step 1
