#!/usr/bin/env python3
"""ctest traces.frameworks: traces/framework_report.py over the committed real-framework runs plans
every one and finds them valid measurements of their shapes (exit 0, a row per run); a copy of one
with a wrong parameter count, or with reserved below allocated, is refused as invalid (exit 1); a
file that is not a run is bad input (exit 2).
usage: check_framework_report.py ZEROLENS RUNS_DIR"""
import glob
import json
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
report = os.path.join(here, "..", "traces", "framework_report.py")


def run_report(zerolens, target):
    return subprocess.run([sys.executable, report, "--zerolens", zerolens, target], capture_output=True, text=True)


def expect(condition, message):
    if not condition:
        print("FAIL: " + message)
        sys.exit(1)


def main(zerolens, runs_dir):
    runs = [p for p in sorted(glob.glob(os.path.join(runs_dir, "*.json"))) if not p.endswith("matrix.json")]
    expect(runs, f"no runs in {runs_dir}")
    result = run_report(zerolens, runs_dir)
    expect(result.returncode == 0, f"report on the committed runs: exit {result.returncode}\n{result.stderr}")
    rows = [line for line in result.stdout.splitlines() if line.startswith("| gpt2")]
    expect(len(rows) == len(runs), f"{len(rows)} rows for {len(runs)} runs:\n{result.stdout}")
    with open(runs[0]) as f:
        good = json.load(f)
    with tempfile.TemporaryDirectory() as scratch:
        cases = []
        wrong_count = json.loads(json.dumps(good))
        wrong_count["model"]["parameter_count"] += 1
        cases.append(("count.json", wrong_count, 1, "parameters"))
        inverted = json.loads(json.dumps(good))
        inverted["steady"]["max_reserved"] = inverted["steady"]["max_allocated"] - 1
        cases.append(("inverted.json", inverted, 1, "allocated <= reserved"))
        missing = json.loads(json.dumps(good))
        del missing["steady"]
        cases.append(("missing.json", missing, 2, "steady: missing"))
        cases.append(("other.json", {"schema": "zerolens.trace", "version": 1}, 2, "not a zerolens.framework-reference"))
        for name, document, code, message in cases:
            path = os.path.join(scratch, name)
            with open(path, "w") as f:
                json.dump(document, f)
            result = run_report(zerolens, path)
            expect(result.returncode == code and message in result.stderr,
                   f"{name}: exit {result.returncode} (want {code}), stderr: {result.stderr}")
    print(f"ok: {len(runs)} committed runs planned and valid; 4 broken copies refused")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
