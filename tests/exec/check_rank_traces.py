#!/usr/bin/env python3
"""`run --measured-trace 'PATH{rank}'` under mpirun: every rank writes its own step, its ops named
by its rank, the same schedule on both ranks (ZeRO-2 data parallelism runs the same ops on each),
the same collective bytes; a path without {rank} is written by rank 0 only.
usage: check_rank_traces.py MPIEXEC ZEROLENS WORKDIR"""
import json
import os
import shutil
import subprocess
import sys


def run(mpiexec, zerolens, trace):
    command = [mpiexec, "-np", "2", zerolens, "run", "--stage", "2", "--steps", "2", "--log-every", "0",
               "--measured-trace", trace]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def main():
    mpiexec, zerolens, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    run(mpiexec, zerolens, os.path.join(work, "step-{rank}.json"))
    traces = [json.load(open(os.path.join(work, f"step-{rank}.json"))) for rank in (0, 1)]
    for rank, trace in enumerate(traces):
        assert trace["source"] == "exec", trace["source"]
        assert trace["ops"], f"rank {rank}: no ops"
        assert {op["rank"] for op in trace["ops"]} == {rank}, f"rank {rank}: ops of other ranks"
    kinds = [[op["kind"] for op in trace["ops"]] for trace in traces]
    assert kinds[0] == kinds[1], "the ranks ran different schedules"
    assert traces[0]["summary"]["collectives"] == traces[1]["summary"]["collectives"]
    run(mpiexec, zerolens, os.path.join(work, "leader.json"))
    assert sorted(os.listdir(work)) == ["leader.json", "step-0.json", "step-1.json"], os.listdir(work)
    print("every rank wrote its own trace:", [len(k) for k in kinds], "ops")


if __name__ == "__main__":
    main()
