#!/usr/bin/env python3
"""Real frameworks measured against zerolens's prediction of the same run (issue 16, step 3).

Reads the runs traces/framework_reference.py recorded (one zerolens.framework-reference JSON per run),
plans each with `zerolens plan --json` (DeepSpeed runs: the very DeepSpeed config the run used; FSDP2
FULL_SHARD at world size 1: ZeRO-3, its CPU offload: parameters and optimizer on the CPU; plain
PyTorch: stage 0), and prints a markdown table of three figures side by side:

  allocated    torch.cuda.max_memory_allocated over the steady steps, against the plan's allocated;
  reserved     max_memory_reserved, against the plan's reserved (its caching-allocator model);
  device used  total - free (cudaMemGetInfo) after each step, against the plan's device used, with
               the CUDA context the run measured before its first tensor (a fact of the machine).

With --hold PERCENT, every run of a framework zerolens has a profile for (DeepSpeed, FSDP2) must have
its allocated peak predicted within PERCENT, and their mean absolute error within --hold-mean PERCENT
(plain PyTorch has no profile and is shown, not held); a summary line per framework follows the table.

It also checks what a run must satisfy to be a valid measurement of that shape, and exits 1 when one
does not: the model has exactly the parameters of the zerolens preset (an independent count of the
shape), allocated <= reserved <= device used, the steady peaks do not exceed the peaks from process
start, and the CUDA context (device used before any tensor) is positive. Exit 2 on bad input.

  python3 traces/framework_report.py --zerolens build/release/cli/zerolens traces/measured/nvidia-h200/frameworks
  python3 traces/framework_report.py --hold 14 --hold-mean 7 traces/measured/nvidia-h200/frameworks
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

MIB = 1 << 20
PROFILED = ("deepspeed", "fsdp2")  # frameworks zerolens plans with their own profile (--framework)


class BadRun(Exception):
    pass


def load_run(path):
    try:
        with open(path) as f:
            run = json.load(f)
    except (OSError, ValueError) as error:
        raise BadRun(f"{path}: {error}") from error
    if run.get("schema") != "zerolens.framework-reference" or run.get("version") != 1:
        raise BadRun(f"{path}: not a zerolens.framework-reference version 1 document")
    for key in ("framework", "model", "micro_batch", "seq_len", "precision", "steady", "from_start", "points"):
        if key not in run:
            raise BadRun(f"{path}: {key}: missing")
    return run


def plan_arguments(run):
    """zerolens plan flags for the same run; the stage and offloads as the framework shards."""
    model = run["model"]
    named = ["--model", model["preset"]] if model.get("preset") else ["--hf-config", model.get("hf_config", "")]
    args = [*named, "--gpus", "1", "--micro-batch", str(run["micro_batch"]),
            "--seq-len", str(run["seq_len"]), "--precision", run["precision"], "--attention", "eager",
            "--activation-checkpointing", "true" if run.get("checkpointing") else "false", "--cluster", "h100-x1",
            "--dropout", "0"]  # framework_reference.py's GPT-2 has no dropout
    framework = run["framework"]
    if framework == "deepspeed":
        return args, run["deepspeed_config"]
    # framework_reference.py steps with torch.optim.AdamW(fused=True) on the GPU (CPU offload steps
    # on the host): no foreach temporaries, which the FSDP profile assumes by default.
    args += ["--optimizer-kernel", run.get("optimizer_kernel", "fused")]
    if framework == "fsdp2":  # FULL_SHARD; CPUOffloadPolicy moves parameters, gradients and the step to the CPU
        offload = run.get("offload_param", "none")
        args += ["--framework", "fsdp2", "--offload-param", offload, "--offload-optimizer", offload]
    elif framework == "torch":
        args += ["--stage", "0"]
    else:
        raise BadRun(f"framework: unknown '{framework}'")
    return args, None


def predict(zerolens, run, scratch):
    args, ds_config = plan_arguments(run)
    if ds_config is not None:
        config_path = os.path.join(scratch, "ds_config.json")
        with open(config_path, "w") as f:
            json.dump(ds_config, f)
        args += ["--deepspeed-config", config_path]
    args += ["--cuda-context", repr(max(0, context_bytes(run)) / 2**30)]
    result = subprocess.run([zerolens, "plan", "--json", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise BadRun(f"zerolens plan {' '.join(args)}: {result.stderr.strip()}")
    return json.loads(result.stdout)


def validity_problems(run, plan):
    problems = []
    count, expected = run["model"].get("parameter_count"), plan["model"]["parameter_count"]
    if count is not None and count != expected:
        problems.append(f"{count} parameters, the zerolens preset has {expected}")
    steady, start = run["steady"], run["from_start"]
    if not steady["max_allocated"] <= steady["max_reserved"] <= steady["device_used_after_steps"]:
        problems.append("allocated <= reserved <= device used does not hold")
    for key in ("max_allocated", "max_reserved"):
        if steady[key] > start[key]:
            problems.append(f"steady {key} exceeds the peak from process start")
    context = run["points"][0]
    if context.get("point") != "context" or context["device_used"] - context["reserved"] <= 0:
        problems.append("no positive CUDA context before the first tensor")
    return problems


def describe(run):
    parts = [run["framework"]]
    if run["framework"] == "deepspeed":
        parts.append(f"ZeRO-{run['stage']}")
    if run.get("offload_optimizer", "none") != "none":
        parts.append("opt:" + run["offload_optimizer"])
    if run.get("offload_param", "none") != "none":
        parts.append("param:" + run["offload_param"])
    if run.get("checkpointing"):
        parts.append("ckpt")
    if run.get("compile"):
        parts.append("compile")
    return " ".join(parts)


def error_percent(predicted, measured):
    return (predicted - measured) / measured * 100 if measured else None


def error(predicted, measured):
    percent = error_percent(predicted, measured)
    return f"{percent:+.1f} %" if percent is not None else "-"


def allocated_error(run, plan):
    return error_percent(plan["devices"]["gpu"]["memory"]["allocated"], run["steady"]["max_allocated"])


def table_row(run, plan):
    memory = plan["devices"]["gpu"]["memory"]
    steady = run["steady"]
    context = run["points"][0]["device_used"] - run["points"][0]["reserved"]
    cells = [run["model"]["preset"], describe(run), f"{run['micro_batch']} x {run['seq_len']}", run["precision"]]
    for measured, predicted in ((steady["max_allocated"], memory["allocated"]),
                                (steady["max_reserved"], memory["reserved"]),
                                (steady["device_used_after_steps"], memory["device_used"])):
        cells += [f"{measured / MIB:.0f}", f"{predicted / MIB:.0f}", error(predicted, measured)]
    cells += [f"{context / MIB:.0f}", f"{run['median_step_s'] * 1e3:.1f}"]
    return "| " + " | ".join(cells) + " |"


def context_bytes(run):
    """The CUDA context the run measured before its first tensor (device used less reserved)."""
    return run["points"][0]["device_used"] - run["points"][0]["reserved"]


HEADER = ("| model | run | batch | precision | allocated measured (MiB) | predicted | error | reserved measured (MiB) "
          "| predicted | error | device used measured (MiB) | predicted | error | CUDA context (MiB) | step (ms) |\n"
          "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def held_summary(errors, hold, hold_mean):
    """One line per profiled framework (allocated: mean and largest absolute error), and what is outside."""
    lines, outside = [], []
    for framework in PROFILED:
        runs = [(name, e) for name, kind, e in errors if kind == framework and e is not None]
        if not runs:
            continue
        mean = sum(abs(e) for _, e in runs) / len(runs)
        name, largest = max(runs, key=lambda item: abs(item[1]))
        lines.append(f"{framework}: {len(runs)} runs, allocated peak mean |error| {mean:.1f} %, "
                     f"largest {largest:+.1f} % ({name})")
        if hold is not None:
            outside += [f"{n}: allocated {e:+.1f} % (held to {hold:g} %)" for n, e in runs if abs(e) > hold]
        if hold_mean is not None and mean > hold_mean:
            outside.append(f"{framework}: mean |error| {mean:.1f} % (held to {hold_mean:g} %)")
    return lines, outside


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", help="a directory of framework_reference.py JSON files (or one file)")
    parser.add_argument("--zerolens", default="build/release/cli/zerolens", help="the zerolens binary")
    parser.add_argument("--hold", type=float, help="largest allocated error (%%) of a DeepSpeed or FSDP2 run")
    parser.add_argument("--hold-mean", type=float, help="largest mean allocated error (%%) per framework")
    args = parser.parse_args(argv)
    paths = sorted(glob.glob(os.path.join(args.runs, "*.json"))) if os.path.isdir(args.runs) else [args.runs]
    paths = [p for p in paths if not p.endswith("matrix.json")]
    if not paths:
        print(f"framework_report: no runs in {args.runs}", file=sys.stderr)
        return 2
    rows, invalid, errors = [], [], []
    try:
        # A directory of its own: two reports at once (ctest -j) must not plan each other's config.
        with tempfile.TemporaryDirectory(prefix="framework_report.") as scratch:
            for path in paths:
                run = load_run(path)
                plan = predict(args.zerolens, run, scratch)
                rows.append(table_row(run, plan))
                errors.append((os.path.basename(path), run["framework"], allocated_error(run, plan)))
                invalid += [f"{os.path.basename(path)}: {p}" for p in validity_problems(run, plan)]
    except BadRun as bad:
        print(f"framework_report: {bad}", file=sys.stderr)
        return 2
    print(HEADER)
    print("\n".join(rows))
    summary, outside = held_summary(errors, args.hold, args.hold_mean)
    print()
    print("\n".join(summary))
    for line in invalid:
        print(f"framework_report: invalid measurement: {line}", file=sys.stderr)
    for line in outside:
        print(f"framework_report: outside what is held: {line}", file=sys.stderr)
    return 1 if invalid or outside else 0


if __name__ == "__main__":
    sys.exit(main())
