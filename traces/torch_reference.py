#!/usr/bin/env python3
"""PyTorch reference for zerolens's measurements (issue 6, validation on hardware).

Builds a GPT-2 of the same shape as a zerolens model (plain PyTorch, no transformers package:
learned positions, pre-layernorm blocks with biases, separate q/k/v/o projections, tanh GELU MLP of
4 x hidden, tied lm_head, no dropout; the parameter count equals zerolens's), trains it for a few
steps on synthetic tokens with AdamW, and reports torch.cuda.max_memory_allocated and the median
step time under
  (a) plain training on one GPU ("plain"), and
  (b) FSDP with CPU offload of the parameters (and so of the optimizer), world size 1
      ("fsdp_cpu_offload"; a single-process NCCL or gloo group on a file:// rendezvous).
Each mode runs in its own process, so one does not inherit the other's allocator state.
Precision: fp32, or bf16/fp16 mixed precision (autocast with fp32 weights; FSDP: MixedPrecision).

The JSON it writes (-o) is merged by traces/measure.sh into traces/measured/<device>/SUMMARY.md,
next to zerolens's prediction and its executor's measurement of the same shape.

Needs PyTorch with CUDA (on the GPU machine: /opt/torch/.venv/bin/python).

examples:
  python traces/torch_reference.py --preset gpt2-tiny --micro-batch 4 --seq-len 64 --precision bf16 -o torch.json
  zerolens presets --model-json gpt2-124m > m.json
  python traces/torch_reference.py --model-json m.json --n-head 12 --seq-len 1024 --mode plain
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

# As sim/model/presets.cpp: n_layer, n_embd, n_head, n_positions, vocab.
PRESETS = {
    "gpt2-tiny": (2, 64, 4, 128, 256),
    "gpt2-124m": (12, 768, 12, 1024, 50257),
    "gpt2-355m": (24, 1024, 16, 1024, 50257),
    "gpt2-774m": (36, 1280, 20, 1024, 50257),
    "gpt2-1.5b": (48, 1600, 25, 1024, 50257),
}
MODES = ("plain", "fsdp_cpu_offload")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shape = parser.add_argument_group("model shape (one of --preset, --model-json, --hf-config; flags override)")
    shape.add_argument("--preset", choices=sorted(PRESETS), help="a zerolens GPT-2 preset")
    shape.add_argument("--model-json", help="a zerolens layer-list model (zerolens presets --model-json NAME); "
                                            "needs --n-head, which the file does not record")
    shape.add_argument("--hf-config", help="a Hugging Face GPT-2 config.json (n_layer, n_embd, n_head, n_positions, vocab_size)")
    for name in ("n-layer", "n-embd", "n-head", "n-positions", "vocab"):
        shape.add_argument(f"--{name}", type=int)
    run = parser.add_argument_group("training")
    run.add_argument("--micro-batch", type=int, default=4, help="sequences per step (default 4, as zerolens run)")
    run.add_argument("--seq-len", type=int, default=64, help="tokens per sequence (default 64, as zerolens run)")
    run.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="bf16")
    run.add_argument("--steps", type=int, default=20, help="optimizer steps (the first is not timed; default 20)")
    run.add_argument("--attention", choices=("eager", "sdpa"), default="eager",
                     help="eager: softmax of the full score matrix, as zerolens's executor; sdpa: scaled_dot_product_attention")
    run.add_argument("--seed", type=int, default=1234)
    run.add_argument("--mode", choices=MODES + ("both",), default="both")
    run.add_argument("--backend", choices=("nccl", "gloo"), default="nccl", help="process group of the FSDP run")
    parser.add_argument("-o", "--output", help="write the JSON here (default: stdout)")
    args = parser.parse_args(argv)
    if sum(x is not None for x in (args.preset, args.model_json, args.hf_config)) > 1:
        parser.error("choose one of --preset, --model-json, --hf-config")
    if args.steps < 2 or args.micro_batch < 1 or args.seq_len < 1:
        parser.error("--steps must be at least 2, --micro-batch and --seq-len at least 1")
    return parser, args


def shape_from_model_json(path, n_head):
    with open(path) as f:
        model = json.load(f)
    params = {p["name"]: p["shape"] for layer in model.get("layers", []) for p in layer.get("params", [])}
    if "wte.weight" not in params or "wpe.weight" not in params:
        raise ValueError(f"{path}: not a GPT-2 layer list (no wte.weight/wpe.weight)")
    blocks = sum(1 for layer in model["layers"] if layer.get("kind") == "transformer_block")
    count = sum(math.prod(shape) for shape in params.values())
    vocab, n_embd = params["wte.weight"]
    return {"n_layer": blocks, "n_embd": n_embd, "n_head": n_head, "n_positions": params["wpe.weight"][0],
            "vocab": vocab}, count


def resolve_shape(parser, args):
    expected = None
    if args.preset:
        shape = dict(zip(("n_layer", "n_embd", "n_head", "n_positions", "vocab"), PRESETS[args.preset]))
    elif args.model_json:
        if args.n_head is None:
            parser.error("--model-json needs --n-head")
        shape, expected = shape_from_model_json(args.model_json, args.n_head)
    elif args.hf_config:
        with open(args.hf_config) as f:
            c = json.load(f)
        shape = {"n_layer": c["n_layer"], "n_embd": c["n_embd"], "n_head": c["n_head"],
                 "n_positions": c.get("n_positions", 1024), "vocab": c["vocab_size"]}
    else:
        shape = {}
    for key in ("n_layer", "n_embd", "n_head", "n_positions", "vocab"):
        value = getattr(args, key)
        if value is not None:
            shape[key] = value
    missing = [k for k in ("n_layer", "n_embd", "n_head", "n_positions", "vocab") if k not in shape]
    if missing:
        parser.error("model shape incomplete, missing: " + ", ".join("--" + k.replace("_", "-") for k in missing))
    if shape["n_embd"] % shape["n_head"]:
        parser.error(f"n_embd {shape['n_embd']} is not a multiple of n_head {shape['n_head']}")
    if args.seq_len > shape["n_positions"]:
        parser.error(f"--seq-len {args.seq_len} exceeds the model's {shape['n_positions']} positions")
    return shape, expected


def gpt2_classes(torch):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self, d, heads, attention):
            super().__init__()
            self.heads, self.attention = heads, attention
            self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d) for _ in range(4))
            self.fc_in, self.fc_out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def attend(self, x):
            b, t, d = x.shape
            q, k, v = (p(x).view(b, t, self.heads, d // self.heads).transpose(1, 2)
                       for p in (self.q_proj, self.k_proj, self.v_proj))
            if self.attention == "sdpa":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
                mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
                y = scores.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v
            return self.o_proj(y.transpose(1, 2).reshape(b, t, d))

        def forward(self, x):
            x = x + self.attend(self.ln_1(x))
            return x + self.fc_out(F.gelu(self.fc_in(self.ln_2(x)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self, s, attention):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(s["vocab"], s["n_embd"]), nn.Embedding(s["n_positions"], s["n_embd"])
            self.h = nn.ModuleList(Block(s["n_embd"], s["n_head"], attention) for _ in range(s["n_layer"]))
            self.ln_f = nn.LayerNorm(s["n_embd"])

        def forward(self, tokens):
            positions = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.wte(tokens) + self.wpe(positions)
            for block in self.h:
                x = block(x)
            return F.linear(self.ln_f(x), self.wte.weight)  # lm_head tied to the embedding

    return GPT2, Block


def training_step(torch, model, optimizer, scaler, autocast_dtype=None):
    """One optimizer step on a batch of token rows (inputs and next-token targets); returns the loss.
    Also traces/framework_reference.py's step for FSDP2 and plain PyTorch."""
    def step(batch):
        with torch.autocast("cuda", dtype=autocast_dtype, enabled=autocast_dtype is not None):
            logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def train(torch, model, optimizer, args, shape, device, autocast_dtype, scaler):
    generator = torch.Generator().manual_seed(args.seed)
    data = torch.randint(0, shape["vocab"], (args.steps, args.micro_batch, args.seq_len + 1), generator=generator)
    one_step = training_step(torch, model, optimizer, scaler, autocast_dtype)
    times, losses = [], []
    for step in range(args.steps):
        batch = data[step].to(device)
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = one_step(batch)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        losses.append(float(loss))
    median = statistics.median(times[1:])  # the first step pays for allocation and kernel selection
    tokens = args.micro_batch * args.seq_len
    return {"max_memory_allocated": torch.cuda.max_memory_allocated(device),
            "max_memory_reserved": torch.cuda.max_memory_reserved(device),
            "median_step_s": median, "tokens_per_s": tokens / median, "step_s": times, "losses": losses}


def run_mode(torch, args, shape):
    GPT2, Block = gpt2_classes(torch)
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    torch.manual_seed(args.seed)
    if args.mode == "plain":
        model = GPT2(shape, args.attention).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
        scaler = torch.amp.GradScaler("cuda") if dtype is torch.float16 else None
        return train(torch, model, optimizer, args, shape, device, dtype, scaler), model
    import torch.distributed as dist
    from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    with tempfile.TemporaryDirectory() as rendezvous:
        dist.init_process_group(args.backend, init_method="file://" + os.path.join(rendezvous, "pg"), rank=0, world_size=1)
        try:
            mixed = MixedPrecision(param_dtype=dtype, reduce_dtype=dtype, buffer_dtype=dtype) if dtype else None
            model = FullyShardedDataParallel(GPT2(shape, args.attention), auto_wrap_policy=ModuleWrapPolicy({Block}),
                                             cpu_offload=CPUOffload(offload_params=True), mixed_precision=mixed,
                                             sharding_strategy=ShardingStrategy.FULL_SHARD, device_id=device)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
            scaler = ShardedGradScaler() if dtype is torch.float16 else None
            return train(torch, model, optimizer, args, shape, device, None, scaler), model
        finally:
            dist.destroy_process_group()


def child_arguments(args, mode, output):
    forwarded = []
    for key, value in vars(args).items():
        if key in ("mode", "output") or value is None:
            continue
        forwarded += [f"--{key.replace('_', '-')}", str(value)]
    return [sys.executable, os.path.abspath(__file__), *forwarded, "--mode", mode, "-o", output]


def run_both(args):
    document = None
    with tempfile.TemporaryDirectory() as scratch:
        for mode in MODES:
            output = os.path.join(scratch, mode + ".json")
            code = subprocess.call(child_arguments(args, mode, output))
            if code != 0:
                print(f"torch_reference.py: the {mode} run failed (exit {code})", file=sys.stderr)
                return code
            with open(output) as f:
                part = json.load(f)
            if document is None:
                document = part
            else:
                document["runs"].update(part["runs"])
    return document


def main(argv=None):
    parser, args = parse_args(argv)
    shape, expected = resolve_shape(parser, args)
    if args.mode == "both":
        document = run_both(args)
        if isinstance(document, int):
            return document
    else:
        try:
            import torch
        except ImportError:
            print("torch_reference.py: PyTorch is not installed in this Python "
                  "(on the GPU machine: /opt/torch/.venv/bin/python)", file=sys.stderr)
            return 2
        if not torch.cuda.is_available():
            print("torch_reference.py: no CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
            return 2
        result, model = run_mode(torch, args, shape)
        count = sum(p.numel() for p in model.parameters()) if args.mode == "plain" else None
        if count is not None and expected is not None and count != expected:
            print(f"torch_reference.py: the model has {count} parameters, the zerolens model {expected}", file=sys.stderr)
            return 2
        document = {"schema": "zerolens.torch-reference", "version": 1, "device": torch.cuda.get_device_name(0),
                    "torch": torch.__version__, "model": dict(shape, parameter_count=count or expected),
                    "micro_batch": args.micro_batch, "seq_len": args.seq_len, "precision": args.precision,
                    "steps": args.steps, "attention": args.attention, "runs": {args.mode: result}}
    text = json.dumps(document, indent=1)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
