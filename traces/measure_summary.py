#!/usr/bin/env python3
"""Writes traces/measured/<device>/SUMMARY.md for traces/measure.sh.

Every figure comes from `zerolens check-measured --json` (the comparison CI runs on the committed
traces), and, when given, from traces/torch_reference.py's JSON; nothing is computed here but the
layout.

usage: measure_summary.py --check CHECK.json --out SUMMARY.md --device-name NAME --base DIR
                          [--torch TORCH.json] [--steps N] [--rounds N] [--machine TEXT] [--mpi TEXT]
                          [--commit TEXT]"""
import argparse
import datetime
import json
import os
import sys

DEVICES = ("gpu", "cpu", "nvme")
# The 1-rank zerolens runs the PyTorch runs stand beside: (torch mode, stage, optimizer, params, label).
TORCH_PAIRS = (("plain", 0, "none", "none", "DP"),
               ("fsdp_cpu_offload", 3, "cpu", "cpu", "ZeRO-3, optimizer and parameters on the CPU"))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", required=True, help="zerolens check-measured --json output")
    parser.add_argument("--out", required=True, help="the markdown file to write")
    parser.add_argument("--device-name", required=True)
    parser.add_argument("--base", required=True, help="directory the trace paths are shown relative to")
    parser.add_argument("--torch", help="torch_reference.py output")
    parser.add_argument("--steps", default="?")
    parser.add_argument("--rounds", default="1")
    parser.add_argument("--rounds-file", help="measure.sh's rounds.tsv: every round's measured and predicted step time")
    parser.add_argument("--machine", default="")
    parser.add_argument("--mpi", default="")
    parser.add_argument("--commit", default="")
    return parser.parse_args()


def config_name(path):
    name = os.path.basename(path)
    return name[: -len(".measured.json")] if name.endswith(".measured.json") else name


def percent(error):
    return "inf" if error is None else f"{error * 100:+.2f} %"


def relative(tolerance):
    return "exact" if tolerance == 0 else f"{tolerance * 100:g} %"


def mb(value):
    return f"{value / 1e6:.3f}"


def by_group(checks, group):
    return [c for c in checks if c["group"] == group]


def peak(checks, device):
    for c in by_group(checks, "peak"):
        if c["quantity"] == f"{device} peak":
            return c
    return None


def driver_side_mb(checks, gpu):
    """What the CUDA libraries took beyond the plan's overhead (shown, not held: cli/validation.cpp)."""
    for c in checks:
        if c["quantity"] == "gpu peak with driver-side overhead" and gpu is not None:
            return mb(c["measured"] - gpu["measured"])
    return "-"


def peak_cell(check):
    if check is None:
        return "-"
    return f"{mb(check['predicted'])} / {mb(check['measured'])} ({percent(check['error'])})"


def all_equal(checks, group):
    rows = by_group(checks, group)
    if not rows:
        return "-"
    return "yes" if all(c["predicted"] == c["measured"] for c in rows) else "**no**"


def offload(run):
    parts = [f"opt:{run['optimizer_device']}" if run["optimizer_device"] != "none" else "",
             f"param:{run['param_device']}" if run["param_device"] != "none" else ""]
    return " ".join(p for p in parts if p) or "-"


def step_ms(checks):
    time = by_group(checks, "time")
    return f"{time[0]['measured'] * 1e3:.2f}" if time else "-"


def step_cells(checks):
    """Step time measured, predicted and the error; "not compared" when the cluster was not calibrated."""
    time = by_group(checks, "time")
    if not time:
        return ["-", "-", "-"]
    t = time[0]
    if not t.get("compared", True):
        return [f"{t['measured'] * 1e3:.2f}", f"{t['predicted'] * 1e3:.3f}", f"not compared ({t.get('not_compared', '')})"]
    return [f"{t['measured'] * 1e3:.2f}", f"{t['predicted'] * 1e3:.2f}", percent(t["error"])]


def step_time_line(check):
    s = check.get("step_time")
    if not s or not s.get("runs"):
        return "step time: none recorded."
    if not s.get("compared"):
        return ("step time: not compared (uncalibrated): the traces were predicted on a datasheet cluster, "
                "not one `zerolens calibrate` measured on this machine.")
    return (f"step time: mean absolute error {s['mean_absolute_error'] * 100:.2f} % over {s['compared']} configs, "
            f"largest {s['max_absolute_error'] * 100:.2f} % (tolerance {relative(s['tolerance'])}).")


def ranks_of(run):
    """Every rank of the run: data x tensor x pipeline parallel."""
    return run["dp_size"] * run.get("tensor_parallel", 1) * run.get("pipeline_parallel", 1)


def matrix_table(traces):
    lines = ["| config | ranks | stage | precision | offload | GPU peak predicted (MB) | GPU peak measured (MB) | GPU error "
             "| GPU driver-side overhead (MB, not held) | CPU peak pred / meas MB (error) | NVMe peak pred / meas MB (error) | model states exact | "
             "collective bytes equal | link bytes equal | step time measured (ms) | step time predicted (ms) | "
             "step time error | verdict |",
             "|---|---:|---:|---|---|---:|---:|---:|---:|---|---|---|---|---|---:|---:|---:|---|"]
    for t in traces:
        run, checks = t["run"], t["checks"]
        gpu = peak(checks, "gpu")
        lines.append(" | ".join([
            f"| {config_name(t['file'])}", str(ranks_of(run)), str(run["stage"]), run["precision"], offload(run),
            mb(gpu["predicted"]) if gpu else "-", mb(gpu["measured"]) if gpu else "-",
            percent(gpu["error"]) if gpu else "-", driver_side_mb(checks, gpu), peak_cell(peak(checks, "cpu")), peak_cell(peak(checks, "nvme")),
            all_equal(checks, "model_state"), all_equal(checks, "collective"), all_equal(checks, "link"),
            *step_cells(checks), "ok" if t["passed"] else "**FAIL**"]) + " |")
    return lines


def torch_partner(traces, torch, stage, optimizer, params):
    for t in traces:
        run = t["run"]
        if (run["dp_size"], run["stage"], run["optimizer_device"], run["param_device"]) == (1, stage, optimizer, params) \
                and run["precision"] == torch.get("precision") and run["grad_accumulation"] == 1:
            return t
    return None


def torch_table(traces, torch):
    lines = ["", "## PyTorch on the same device (traces/torch_reference.py)", "",
             f"GPT-2 of the same shape ({json.dumps(torch.get('model', {}))}), micro-batch {torch.get('micro_batch')} "
             f"x seq {torch.get('seq_len')}, {torch.get('precision')}, AdamW, {torch.get('steps')} steps; "
             f"torch {torch.get('torch')} on {torch.get('device')}. PyTorch's figure is "
             "torch.cuda.max_memory_allocated (the caching allocator's high-water mark).", "",
             "| run | peak GPU memory (MB) | step time (ms, median) |", "|---|---:|---:|"]
    for mode, stage, optimizer, params, label in TORCH_PAIRS:
        t = torch_partner(traces, torch, stage, optimizer, params)
        if t is not None:
            gpu = peak(t["checks"], "gpu")
            lines.append(f"| zerolens predicted: {label}, 1 rank ({config_name(t['file'])}) | {mb(gpu['predicted'])} | - |")
            lines.append(f"| zerolens executor measured: same (recorded step time) | {mb(gpu['measured'])} | {step_ms(t['checks'])} |")
        run = torch.get("runs", {}).get(mode)
        if run is None:
            lines.append(f"| PyTorch {mode}: not recorded | - | - |")
            continue
        lines.append(f"| PyTorch {mode} | {mb(run['max_memory_allocated'])} | {run['median_step_s'] * 1e3:.2f} |")
    return lines


def read_rounds(path):
    """{config: [(round, measured s, predicted s)]} from measure.sh's rounds.tsv (none: {})."""
    rounds = {}
    if not path or not os.path.exists(path):
        return rounds
    with open(path) as f:
        for number, line in enumerate(f, 1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 4:
                raise SystemExit(f"{path}:{number}: expected 4 tab-separated fields, got {len(fields)}")
            name, round_number, measured, predicted = fields
            rounds.setdefault(name, []).append((int(round_number), float(measured), float(predicted)))
    return rounds


def round_error(measured, predicted):
    return (measured - predicted) / predicted


def rounds_table(rounds, tolerance):
    """Every round's step time per config, and how many runs were outside the tolerance per round."""
    if not rounds:
        return []
    count = max(r for runs in rounds.values() for r, _, _ in runs)
    lines = ["", "## Step time in every round", "",
             "Each round ran after its own calibration and predicted on it; the table above keeps each "
             "config's fastest round. Measured / predicted (error):", "",
             "| config | " + " | ".join(f"round {r}" for r in range(1, count + 1)) + " |",
             "|---|" + "---:|" * count]
    runs_in, outside, errors = [0] * count, [0] * count, []
    for name in sorted(rounds):
        cells = ["-"] * count
        for r, measured, predicted in rounds[name]:
            error = round_error(measured, predicted)
            cells[r - 1] = f"{measured * 1e3:.2f} / {predicted * 1e3:.2f} ms ({percent(error)})"
            errors.append(abs(error))
            runs_in[r - 1] += 1
            outside[r - 1] += tolerance is not None and abs(error) > tolerance
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    line = f"Every run: mean absolute error {sum(errors) / len(errors) * 100:.2f} % over {len(errors)} runs"
    if tolerance is not None:
        line += f"; outside {relative(tolerance)}: " + ", ".join(
            f"{outside[r]} of {runs_in[r]} in round {r + 1}" for r in range(count))
    return lines + ["", line + "."]


def main():
    args = parse_args()
    with open(args.check) as f:
        check = json.load(f)
    traces = check["traces"]
    for t in traces:
        t["file"] = os.path.relpath(t["file"], args.base)
    tol = check["tolerances"]
    failed = [config_name(t["file"]) for t in traces if not t["passed"]]
    lines = [f"# Measured on {args.device_name}", "",
             f"Written by `traces/measure.sh` on {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
             f"{args.steps} steps per config" + (f", the best of {args.rounds} rounds" if args.rounds != "1" else "")
             + f"; zerolens {args.commit}.", "",
             f"- machine: {args.machine}", f"- MPI: {args.mpi}",
             f"- tolerances: peak {relative(tol['peak_memory'])} per device; model states per device and category "
             f"{relative(tol['model_states'])}; bytes per collective kind and per link {relative(tol['collective_bytes'])}; "
             + (f"step time {relative(tol['step_time'])} when the cluster is calibrated" if tol.get("step_time") is not None
                else "step time not held"),
             "- peaks are per rank (CPU and NVMe: the rank's part of the node); MB = 1e6 bytes; the step time is the "
             "recorded one, the lowest mean of 8 consecutive steps (the first left out); the GPU peak held is the "
             "schedule's memory, the CUDA libraries' own driver-side memory beyond the plan's workspace is shown "
             "beside it", "",
             f"{len(traces)} configs, " + ("all within tolerance." if not failed else f"outside tolerance: {', '.join(failed)}."),
             step_time_line(check), ""]
    lines += matrix_table(traces)
    if (check.get("step_time") or {}).get("compared"):  # calibrated: each round on its own calibration
        lines += rounds_table(read_rounds(args.rounds_file), tol.get("step_time"))
    if args.torch:
        with open(args.torch) as f:
            lines += torch_table(traces, json.load(f))
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
