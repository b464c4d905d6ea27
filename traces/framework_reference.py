#!/usr/bin/env python3
"""Real DeepSpeed, PyTorch FSDP2 and plain PyTorch on one GPU, measured as zerolens predicts them
(issue 16, step 3): a GPT-2 of a zerolens preset's shape (traces/torch_reference.py's model) trained
on synthetic tokens for a few steps, recording for each run

  - torch.cuda.max_memory_allocated / max_memory_reserved from process start (the initialisation
    spike included) and over the steady-state steps (peaks reset after the warm-up steps);
  - device used (torch.cuda.mem_get_info: total - free, CUDA context and every library included)
    at process start (context only), after set-up, and after every phase of every step;
  - allocated/reserved after set-up and after each step, the allocator's own counters
    (torch.cuda.memory_stats: segments, retries, pool peaks), step times and losses;
  - the exact DeepSpeed config the run used, so zerolens plans the very same config.

One config per process, so no run inherits another's allocator. With --matrix, runs the list of
configs below (or those matching --only), each in its own process with a time limit, and writes one
JSON per config into --out; the whole matrix stops at --deadline seconds.

  python traces/framework_reference.py --framework deepspeed --stage 3 --preset gpt2-124m -o ds3.json
  python traces/framework_reference.py --matrix --out fw/ --deadline 170
  python traces/framework_reference.py --list

Needs PyTorch with CUDA; --framework deepspeed needs DeepSpeed (../shared/device/README.md, 4).
Without a GPU every run exits 3 and says why (the matrix records that and goes on).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import PRESETS, gpt2_classes, training_step  # noqa: E402  (the references' one GPT-2)
from zerolens_record import RunRecorder  # noqa: E402  (what a user adds to a real run)

NO_GPU_EXIT = 3
FRAMEWORKS = ("deepspeed", "fsdp2", "torch")

# name: flags. Every run: bf16, micro-batch 4, sequence 1024 (GPT-2's context), 8 steps, unless said; the
# last rows change the batch, so activations' share of the peak is held at more than one size.
MATRIX = """
ds-z0-gpt2-124m        --framework deepspeed --stage 0
ds-z1-gpt2-124m        --framework deepspeed --stage 1
ds-z2-gpt2-124m        --framework deepspeed --stage 2
ds-z3-gpt2-124m        --framework deepspeed --stage 3
ds-z3-ckpt-gpt2-124m   --framework deepspeed --stage 3 --checkpointing
fsdp2-gpt2-124m        --framework fsdp2
fsdp2-ckpt-gpt2-124m   --framework fsdp2 --checkpointing
torch-gpt2-124m        --framework torch
ds-z2-optcpu-gpt2-124m --framework deepspeed --stage 2 --offload-optimizer cpu
ds-z3-optcpu-paramcpu-gpt2-124m --framework deepspeed --stage 3 --offload-optimizer cpu --offload-param cpu
fsdp2-paramcpu-gpt2-124m --framework fsdp2 --offload-param cpu
ds-z3-gpt2-355m        --framework deepspeed --stage 3 --preset gpt2-355m
ds-z2-ckpt-gpt2-355m   --framework deepspeed --stage 2 --checkpointing --preset gpt2-355m
fsdp2-gpt2-355m        --framework fsdp2 --preset gpt2-355m
ds-z1-fp16-gpt2-124m   --framework deepspeed --stage 1 --precision fp16
ds-z2-fp32-gpt2-124m   --framework deepspeed --stage 2 --precision fp32
torch-compile-gpt2-124m --framework torch --compile
ds-z2-mb8-gpt2-124m    --framework deepspeed --stage 2 --micro-batch 8
ds-z3-mb8-gpt2-124m    --framework deepspeed --stage 3 --micro-batch 8
fsdp2-mb8-gpt2-124m    --framework fsdp2 --micro-batch 8
ds-z1-mb2-seq512-gpt2-355m --framework deepspeed --stage 1 --preset gpt2-355m --micro-batch 2 --seq-len 512
"""


def matrix_entries():
    entries = []
    for line in MATRIX.strip().splitlines():
        name, *flags = line.split()
        entries.append((name, flags))
    return entries


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", choices=FRAMEWORKS, default="deepspeed")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="gpt2-124m")
    parser.add_argument("--stage", type=int, choices=(0, 1, 2, 3), default=0, help="DeepSpeed ZeRO stage")
    parser.add_argument("--offload-optimizer", choices=("none", "cpu"), default="none",
                        help="DeepSpeed offload_optimizer.device (stage >= 1)")
    parser.add_argument("--offload-param", choices=("none", "cpu"), default="none",
                        help="DeepSpeed offload_param.device (stage 3) or FSDP2's CPUOffloadPolicy")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="bf16")
    parser.add_argument("--checkpointing", action="store_true", help="activation checkpointing of every block")
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps (default 8)")
    parser.add_argument("--warmup", type=int, default=2, help="steps before the steady-state peaks are reset")
    parser.add_argument("--compile", action="store_true", help="--framework torch: torch.compile the model")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("-o", "--output", help="write the JSON here (default: stdout)")
    group = parser.add_argument_group("matrix")
    group.add_argument("--matrix", action="store_true", help="run the matrix, one process per config")
    group.add_argument("--list", action="store_true", help="print the matrix and exit")
    group.add_argument("--only", help="regex: run only the matrix configs whose name matches")
    group.add_argument("--out", help="--matrix: directory of the JSON files")
    group.add_argument("--deadline", type=float, default=600, help="--matrix: seconds for the whole matrix")
    group.add_argument("--per-run-timeout", type=float, default=90, help="--matrix: seconds per config")
    args = parser.parse_args(argv)
    if args.steps <= args.warmup or args.warmup < 1:
        parser.error("--steps must exceed --warmup, and --warmup be at least 1")
    if args.micro_batch < 1 or args.seq_len < 1 or args.seq_len > PRESETS[args.preset][3]:
        parser.error(f"--micro-batch must be positive and --seq-len in 1..{PRESETS[args.preset][3]}")
    if args.framework == "deepspeed":
        if args.offload_optimizer != "none" and args.stage == 0:
            parser.error("--offload-optimizer needs --stage 1, 2 or 3 (DeepSpeed: ZeRO-Offload)")
        if args.offload_param != "none" and args.stage != 3:
            parser.error("--offload-param needs --stage 3 (DeepSpeed: ZeRO-Infinity)")
    elif args.stage or args.offload_optimizer != "none":
        parser.error(f"--stage and --offload-optimizer are DeepSpeed's; --framework {args.framework} has neither")
    if args.framework == "torch" and args.offload_param != "none":
        parser.error("--offload-param needs --framework deepspeed or fsdp2")
    if args.compile and args.framework != "torch":
        parser.error("--compile is for --framework torch")
    if args.matrix and not args.out:
        parser.error("--matrix needs --out")
    return args


def deepspeed_config(args):
    """The DeepSpeed JSON of the run: DeepSpeed's defaults except what the run sets."""
    zero = {"stage": args.stage}
    if args.offload_optimizer != "none":
        zero["offload_optimizer"] = {"device": args.offload_optimizer, "pin_memory": True}
    if args.offload_param != "none":
        zero["offload_param"] = {"device": args.offload_param, "pin_memory": True}
    config = {"train_micro_batch_size_per_gpu": args.micro_batch, "gradient_accumulation_steps": 1,
              "zero_optimization": zero, "bf16": {"enabled": args.precision == "bf16"},
              "fp16": {"enabled": args.precision == "fp16"},
              # The client optimizer is torch's AdamW (DeepSpeed's compiled ops are not built there).
              "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False,
              "steps_per_print": 1 << 30}
    return config


def build_model(torch, args, shape, checkpointing):
    GPT2, Block = gpt2_classes(torch)

    class Model(GPT2):
        def forward(self, tokens):
            if not checkpointing:
                return super().forward(tokens)
            from torch.utils.checkpoint import checkpoint
            positions = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.wte(tokens) + self.wpe(positions)
            for block in self.h:
                x = checkpoint(block, x, use_reentrant=False)
            return torch.nn.functional.linear(self.ln_f(x), self.wte.weight)

    torch.manual_seed(args.seed)
    return Model(shape, "eager"), Block


def set_up_deepspeed(torch, args, model, device):
    os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": os.environ.get("MASTER_PORT", "29517")})
    import deepspeed
    deepspeed.init_distributed(dist_backend="nccl")
    on_gpu = args.offload_optimizer == "none" and args.offload_param == "none"
    params = [p for p in model.parameters()]
    # fused AdamW on the GPU: one kernel and no temporaries, as DeepSpeed's FusedAdam.
    optimizer = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, fused=True if on_gpu else None)
    config = deepspeed_config(args)
    engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)

    def step(batch):
        logits = engine(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                 batch[:, 1:].reshape(-1))
        engine.backward(loss)
        engine.step()
        return loss.detach()

    return step, {"deepspeed": deepspeed.__version__, "deepspeed_config": config,
                  "optimizer_class": type(engine.optimizer).__name__}


def set_up_fsdp2(torch, args, model, block_class, device):
    import torch.distributed as dist
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    rendezvous = tempfile.mkdtemp()
    dist.init_process_group("nccl", init_method="file://" + os.path.join(rendezvous, "pg"), rank=0, world_size=1,
                            device_id=device)
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
    policy = {"mp_policy": MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=dtype)} if dtype else {}
    if args.offload_param == "cpu":
        policy["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
    else:
        model = model.to(device)
    for block in model.h:
        fully_shard(block, **policy)
    fully_shard(model, **policy)
    fused = args.offload_param == "none"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True if fused else None)
    scaler = torch.amp.GradScaler("cuda") if dtype is torch.float16 else None
    return training_step(torch, model, optimizer, scaler), {"fsdp": "fully_shard (FSDP2)",
                                                        "optimizer_class": type(optimizer).__name__}


def set_up_torch(torch, args, model, device):
    model = model.to(device)
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
    scaler = torch.amp.GradScaler("cuda") if dtype is torch.float16 else None
    if args.compile:
        model = torch.compile(model)
    return training_step(torch, model, optimizer, scaler, dtype), {"optimizer_class": "AdamW (fused)",
                                                                "autocast": args.precision}


def run_one(args):
    try:
        import torch
    except ImportError:
        print("framework_reference.py: PyTorch is not installed in this Python", file=sys.stderr)
        return NO_GPU_EXIT, None
    if not torch.cuda.is_available():
        print("framework_reference.py: no CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return NO_GPU_EXIT, None
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    recorder = RunRecorder(args.framework, {"preset": args.preset}, args.micro_batch, args.seq_len, args.precision,
                           stage=args.stage, offload_optimizer=args.offload_optimizer,
                           offload_param=args.offload_param, checkpointing=args.checkpointing,
                           warmup=args.warmup, device=device, torch=torch)
    shape = dict(zip(("n_layer", "n_embd", "n_head", "n_positions", "vocab"), PRESETS[args.preset]))
    model, block_class = build_model(torch, args, shape, args.checkpointing)
    count = sum(p.numel() for p in model.parameters())
    if args.framework == "deepspeed":
        step, framework = set_up_deepspeed(torch, args, model, device)
    elif args.framework == "fsdp2":
        step, framework = set_up_fsdp2(torch, args, model, block_class, device)
    else:
        step, framework = set_up_torch(torch, args, model, device)
    recorder.mark("set up")
    generator = torch.Generator().manual_seed(args.seed)
    data = torch.randint(0, shape["vocab"], (args.steps, args.micro_batch, args.seq_len + 1), generator=generator)
    for index in range(args.steps):
        batch = data[index].to(device)
        with recorder.step():
            loss = step(batch)
        recorder.record_loss(loss)
    document = recorder.document()
    document.update(framework, model=dict(shape, preset=args.preset, parameter_count=count), compile=args.compile,
                    nccl=".".join(map(str, torch.cuda.nccl.version())) if args.framework != "torch" else None)
    return 0, document


def write(document, path):
    text = json.dumps(document, indent=1) + "\n"
    if not path:
        sys.stdout.write(text)
        return
    scratch = path + ".part"
    with open(scratch, "w") as f:
        f.write(text)
    os.replace(scratch, path)


def run_matrix(args):
    os.makedirs(args.out, exist_ok=True)
    deadline = time.monotonic() + args.deadline
    outcome, worst = {}, 0
    for index, (name, flags) in enumerate(matrix_entries()):
        if args.only and not re.search(args.only, name):
            continue
        left = deadline - time.monotonic()
        if left < 10:
            outcome[name] = "not run (deadline)"
            continue
        output = os.path.join(args.out, name + ".json")
        command = [sys.executable, os.path.abspath(__file__), *flags, "--steps", str(args.steps),
                   "--warmup", str(args.warmup), "-o", output]
        env = dict(os.environ, MASTER_PORT=str(29600 + index))
        started = time.monotonic()
        with open(os.path.join(args.out, name + ".log"), "w") as log:
            try:
                code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                       timeout=min(args.per_run_timeout, left))
            except subprocess.TimeoutExpired:
                code = "timeout"
        seconds = time.monotonic() - started
        outcome[name] = f"exit {code}, {seconds:.1f} s"
        print(f"{name:40s} {outcome[name]}", flush=True)
        if code == NO_GPU_EXIT:
            worst = worst or NO_GPU_EXIT
        elif code != 0:
            worst = 1
    write({"schema": "zerolens.framework-matrix", "version": 1, "runs": outcome},
          os.path.join(args.out, "matrix.json"))
    return worst


def main(argv=None):
    args = parse_args(argv)
    if args.list:
        for name, flags in matrix_entries():
            print(name, " ".join(flags))
        return 0
    if args.matrix:
        return run_matrix(args)
    code, document = run_one(args)
    if document is not None:
        write(document, args.output)
    return code


if __name__ == "__main__":
    sys.exit(main())
