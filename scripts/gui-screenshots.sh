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
# The 4-GPU ZeRO-3 walkthrough: a layer's parameters gathered from their owners (the seed's step
# 11), the full gradients of every rank reduce-scattered to their owners (step 20), then each view
# at the reduce-scatter.
shot walkthrough-ranks-gather --walkthrough --view ranks --seed-step 11
shot walkthrough-ranks-reduce --walkthrough --view ranks --seed-step 20
for view in timeline memory traffic compare; do
  shot "walkthrough-$view" --walkthrough --view "$view" --seed-step 20
done
# LLaMA-2 7B on 64 x A100-80GB (8 nodes), ZeRO-3, bf16, micro-batch 4, checkpointing: the step's
# timeline at the GPU's peak (the last layer's backward) and its memory stacked by category.
llama=(--model llama2-7b --cluster dgx-a100-80gb --gpus 64 --stage 3 --precision bf16 --micro-batch 4
       --activation-checkpointing true)
shot llama2-7b-64-timeline "${llama[@]}" --view timeline --step 108
shot llama2-7b-64-memory "${llama[@]}" --view memory --step 108
shot llama2-7b-64-ranks "${llama[@]}" --view ranks --step 106
# Llama 2 7B on 8 x A100-80GB, tensor parallel 2 with sequence parallelism x data parallel 4,
# ZeRO-1, bf16: rank 5's tensor-parallel group (ranks 4 and 5) reduce-scatters layer h.21's
# activation gradients in backward; the timeline's rows are rank 5's data-parallel group.
tp=(--model llama2-7b --cluster dgx-a100-80gb --gpus 8 --tp 2 --sp true --stage 1 --precision bf16
    --seq-len 4096 --rank 5)
shot llama2-7b-tp2-ranks "${tp[@]}" --view ranks --step 246
shot llama2-7b-tp2-timeline "${tp[@]}" --view timeline --step 246
# The same model as tensor parallel 2 x pipeline 2 x data parallel 2 (ZeRO-1, 8 micro-batches of 1
# a step): the Compare tab's 3D layouts of the 8 GPUs beside the ZeRO variants, the stage-2/3
# variants the pipeline engine refuses listed with the reason.
shot llama2-7b-3d-compare --model llama2-7b --cluster dgx-a100-80gb --gpus 8 --tp 2 --pp 2 --stage 1 \
  --precision bf16 --seq-len 4096 --grad-accum 8 --view compare
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
