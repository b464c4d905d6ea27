#!/usr/bin/env python3
"""Issue 21, "refusal before any output, once": under mpirun every rank parses the same flags and
plans the same run, so what `zerolens run` and `validate` refuse is printed once per job (by rank
0), before the header or any table: standard output stays empty and standard error holds one
"error:" line, whichever stage refuses (the flag parser, the model the executor cannot train, a
parallelism or engine feature it does not run).
usage: check_refusal_once.py MPIEXEC ZEROLENS TEST_DATA_DIR"""
import os
import subprocess
import sys


def cases(data):
    """(arguments after `zerolens`, text the one error line must hold)"""
    mixtral = os.path.join(data, "hf", "tiny-mixtral.json")
    return [
        (["run", "--micro-batch-size", "4"], "--micro-batch-size: not a flag"),
        (["run", "--model", "llama2-7b", "--steps", "1"], "RMSNorm is not supported"),
        (["validate", "--model", "llama2-7b", "--steps", "1"], "RMSNorm is not supported"),
        (["run", "--hf-config", mixtral, "--ep", "2", "--steps", "1"], "RMSNorm is not supported"),
        (["run", "--model", "gpt2-tiny-moe", "--ep", "2", "--save", "ep.ckpt", "--steps", "1"],
         "--save: checkpoints of expert-parallel runs"),
        (["run", "--cpu-checkpointing", "true", "--activation-checkpointing", "true", "--steps", "1"],
         "cpu_checkpointing"),
    ]


def main():
    mpiexec, zerolens, data = sys.argv[1:4]
    for arguments, expected in cases(data):
        command = [mpiexec, "-np", "2", zerolens] + arguments
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        shown = " ".join(arguments) + ":\n" + done.stdout + done.stderr
        assert done.returncode != 0, shown
        assert done.stdout == "", "printed before refusing: " + shown
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, f"{len(errors)} error lines, not 1: " + shown
        assert expected in errors[0], shown
        print(" ".join(arguments), "->", errors[0])


if __name__ == "__main__":
    main()
