#!/usr/bin/env python3
"""ctest scripts.published_throughput: scripts/published-throughput.sh runs the papers' twelve
cases with this build (it broke once, unnoticed, when layer lists began to carry their shape), and
its table is the one docs/published-throughput.md shows: a change to the model that moves a row
must regenerate the document.
usage: check_published_throughput.py ZEROLENS"""
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..")


def table_rows(text):
    rows, on = [], False
    for line in text.splitlines():
        if line.startswith("case "):
            on = True
        elif on and (line.startswith("```") or not line.strip()):
            break
        if on and not line.startswith("-"):
            rows.append(line.rstrip())
    return rows


def main(zerolens):
    env = dict(os.environ)
    env.pop("ZL_TRACE_ARGS", None)
    result = subprocess.run(["bash", os.path.join(root, "scripts", "published-throughput.sh"), zerolens],
                            capture_output=True, text=True, env=env, timeout=240)
    if result.returncode != 0:
        sys.exit(f"FAIL: published-throughput.sh exit {result.returncode}\n{result.stdout}\n{result.stderr}")
    produced = table_rows(result.stdout)
    if len(produced) != 13:
        sys.exit(f"FAIL: {len(produced) - 1} cases, expected 12:\n{result.stdout}")
    with open(os.path.join(root, "docs", "published-throughput.md")) as f:
        documented = table_rows(f.read())
    if produced != documented[:13]:
        changed = [f"  now: {a}\n  doc: {b}" for a, b in zip(produced, documented) if a != b]
        sys.exit("FAIL: docs/published-throughput.md's table is not what the script prints now "
                 "(regenerate it):\n" + "\n".join(changed))
    print("ok: 12 published cases planned; the document's table is current")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
