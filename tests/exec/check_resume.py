#!/usr/bin/env python3
"""Resharding a ZeRO checkpoint: 2 ranks train 4 steps and save; 4 ranks resume to step 6. The
losses of steps 5-6 must equal those of 4 ranks training 6 steps straight (the same global batch:
2 x 4 = 4 x 2 samples per step), up to float summation order; and a corrupted rank file is refused.
The same in bf16 with the optimizer and parameters offloaded to NVMe files (the checkpoint is read
from and written to the swap files), up to bf16 rounding of sums in another order.
usage: check_resume.py MPIEXEC ZEROLENS WORKDIR"""
import json
import os
import re
import shutil
import subprocess
import sys


def losses(output):
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^\s+(\d+)\s+([0-9.]+)\s", output, re.M)}


def run(mpiexec, ranks, zerolens, *args):
    command = [mpiexec, "-np", str(ranks), zerolens, "run", "--stage", "3", "--log-every", "1", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


def main():
    mpiexec, zerolens, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    checkpoint = os.path.join(work, "ckpt")
    code, straight = run(mpiexec, 4, zerolens, "--micro-batch", "2", "--steps", "6")
    assert code == 0, straight
    code, saved = run(mpiexec, 2, zerolens, "--micro-batch", "4", "--steps", "4", "--save", checkpoint)
    assert code == 0, saved
    code, resumed = run(mpiexec, 4, zerolens, "--micro-batch", "2", "--steps", "6", "--resume", checkpoint)
    assert code == 0, resumed
    reference, after = losses(straight), losses(resumed)
    assert sorted(after) == [5, 6], resumed
    for step in (5, 6):
        assert abs(after[step] - reference[step]) < 1e-4, (step, after[step], reference[step])
    for step in (1, 2, 3, 4):
        assert abs(losses(saved)[step] - reference[step]) < 1e-4, (step, saved)
    print("resharded 2 -> 4 ranks:", {s: (after[s], reference[s]) for s in (5, 6)})
    check_nvme_resume(mpiexec, zerolens, work)

    rank_file = os.path.join(checkpoint, "step_00000004", "rank_00001.bin")
    with open(rank_file, "r+b") as f:
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 0x40]))
    code, refused = run(mpiexec, 4, zerolens, "--micro-batch", "2", "--steps", "6", "--resume", checkpoint)
    assert code != 0 and "corrupted" in refused, refused
    print("a corrupted rank file is refused")


def check_nvme_resume(mpiexec, zerolens, work):
    config = os.path.join(work, "nvme.json")
    with open(config, "w") as f:
        json.dump({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                   "zero_optimization": {"stage": 3, "sub_group_size": 20000,
                                         "stage3_param_persistence_threshold": 100,
                                         "offload_optimizer": {"device": "nvme", "nvme_path": os.path.join(work, "nvme")},
                                         "offload_param": {"device": "nvme", "nvme_path": os.path.join(work, "nvme"),
                                                           "buffer_size": 20000}}}, f)
    checkpoint = os.path.join(work, "ckpt-nvme")
    common = ("-c", config, "--seq-len", "64")
    code, straight = run(mpiexec, 4, zerolens, *common, "--micro-batch", "2", "--steps", "6")
    assert code == 0, straight
    code, saved = run(mpiexec, 2, zerolens, *common, "--micro-batch", "4", "--steps", "4", "--save", checkpoint)
    assert code == 0, saved
    code, resumed = run(mpiexec, 4, zerolens, *common, "--micro-batch", "2", "--steps", "6", "--resume", checkpoint)
    assert code == 0, resumed
    reference, after = losses(straight), losses(resumed)
    assert sorted(after) == [5, 6], resumed
    for step in (5, 6):
        assert abs(after[step] - reference[step]) < 2e-3 * reference[step], (step, after[step], reference[step])
    assert os.listdir(os.path.join(work, "nvme")) == [], "the swap files outlive the run"
    print("nvme offload, resharded 2 -> 4 ranks:", {s: (after[s], reference[s]) for s in (5, 6)})


if __name__ == "__main__":
    main()
