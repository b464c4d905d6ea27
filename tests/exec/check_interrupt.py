#!/usr/bin/env python3
"""Reliability of `zerolens run` (issue 19): SIGTERM and SIGINT end a run with NVMe offload cleanly
(exit 143 / 130, the message, no swap files or partial checkpoint left in nvme_path), on one process
and on 2 ranks under mpirun whose ranks get the signal; a rank that stops (kill -STOP) makes the
collective watchdog (--collective-timeout) abort the job with a message naming the rank and the
collective, instead of hanging; a rank killed with SIGKILL leaves only its own swap directories,
which the next run in that nvme_path removes; bad --collective-timeout values are refused naming the flag.
The time bounds are hang guards, not performance checks.
usage: check_interrupt.py MPIEXEC ZEROLENS WORKDIR"""
import os
import shutil
import signal
import subprocess
import sys
import time

NVME = ["--stage", "3", "--precision", "bf16", "--offload-optimizer", "nvme", "--offload-param", "nvme"]


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def wait_for(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def swap_files(nvme):
    return [os.path.join(d, f) for d, _, files in os.walk(nvme) for f in files]


def start(command):
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process, seconds=60):
    try:
        output, _ = process.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        raise AssertionError("hang: the run did not end within %d s:\n%s" % (seconds, output))
    return process.returncode, output


def interrupted_run(prefix, zerolens, work, name, sig, ranks):
    nvme = os.path.join(work, name)
    save = os.path.join(work, name + "-ckpt")
    os.makedirs(nvme)
    process = start(prefix + [zerolens, "run", "--steps", "1000000", "--log-every", "1", "--save", save,
                              "--save-every", "1", "--nvme-path", nvme, *NVME])
    # The swap files of every rank exist and steps are being taken.
    wait_for(lambda: len([d for d in os.listdir(nvme) if d.startswith("zerolens-")]) == 2 * ranks
             and os.path.isdir(save) and len(swap_files(nvme)) > 0, 120, "the swap files")
    time.sleep(1)
    targets = [process.pid] if ranks == 1 else children(process.pid)
    assert len(targets) == ranks, targets
    for pid in targets:  # as mpirun forwards it: every rank gets the signal
        os.kill(pid, sig)
    code, output = finish(process)
    name_of = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}[sig]
    assert "zerolens run: interrupted by %s at step " % name_of in output, output
    assert "swap files removed" in output, output
    if ranks == 1:
        assert code == 128 + sig, (code, output)
    else:
        assert code != 0, output
    assert os.listdir(nvme) == [], (os.listdir(nvme), output)
    leftovers = [p for p in os.listdir(save) if p.endswith(".partial")]
    assert leftovers == [], leftovers


def stuck_rank(mpiexec, zerolens, work):
    nvme = os.path.join(work, "stuck")
    os.makedirs(nvme)
    process = start([mpiexec, "-np", "2", zerolens, "run", "--steps", "1000000", "--log-every", "1",
                     "--collective-timeout", "2", "--nvme-path", nvme, *NVME])
    wait_for(lambda: len(swap_files(nvme)) > 0, 120, "the swap files")
    time.sleep(1)
    ranks = children(process.pid)
    assert len(ranks) == 2, ranks
    # The rank that is not rank 0: its pid is the larger one (mpirun starts them in order).
    stopped = max(ranks)
    os.kill(stopped, signal.SIGSTOP)
    try:
        code, output = finish(process, 60)
    finally:
        try:
            os.kill(stopped, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert code != 0, output
    assert "zerolens run: rank 0: MPI_I" in output, output
    assert "made no progress for 2 s; a peer is stuck or dead; aborting" in output, output


def killed_rank(mpiexec, zerolens, work):
    """A rank killed with SIGKILL cannot remove its swap directories; the survivor removes its own as
    the job aborts, and the next run in that nvme_path removes the dead one's, saying so."""
    nvme = os.path.join(work, "killed")
    os.makedirs(nvme)
    process = start([mpiexec, "-np", "2", zerolens, "run", "--steps", "1000000", "--log-every", "1",
                     "--nvme-path", nvme, *NVME])
    wait_for(lambda: len(swap_files(nvme)) > 0 and len(os.listdir(nvme)) == 4, 120, "the swap files")
    time.sleep(1)
    ranks = children(process.pid)
    assert len(ranks) == 2, ranks
    victim = max(ranks)
    os.kill(victim, signal.SIGKILL)
    code, output = finish(process, 60)
    assert code != 0, output
    left = sorted(os.listdir(nvme))
    assert all(("-pid%d@" % victim) in d for d in left), (left, victim, output)
    done = subprocess.run([zerolens, "run", "--steps", "1", "--log-every", "0", "--nvme-path", nvme, *NVME],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert left, output  # SIGKILL: the victim removed nothing
    assert "removed the stale swap directory" in done.stderr and "process %d is gone" % victim in done.stderr, \
        done.stderr
    assert os.listdir(nvme) == [], os.listdir(nvme)


def bad_timeouts(zerolens):
    done = subprocess.run([zerolens, "run", "--steps", "1", "--log-every", "0", "--collective-timeout", "0.5"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    for value in ["-1", "nan", "abc", "inf", ""]:
        done = subprocess.run([zerolens, "run", "--steps", "1", "--collective-timeout", value],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (value, done.returncode, done.stdout + done.stderr)
        assert "--collective-timeout" in done.stderr, (value, done.stderr)


def main():
    mpiexec, zerolens, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    bad_timeouts(zerolens)
    interrupted_run([], zerolens, work, "term1", signal.SIGTERM, 1)
    interrupted_run([], zerolens, work, "int1", signal.SIGINT, 1)
    interrupted_run([mpiexec, "-np", "2"], zerolens, work, "term2", signal.SIGTERM, 2)
    stuck_rank(mpiexec, zerolens, work)
    killed_rank(mpiexec, zerolens, work)
    print("ok")


if __name__ == "__main__":
    main()
