#!/usr/bin/env python3
"""ctest traces.zerolens_record: traces/zerolens_record.py without PyTorch, on a stand-in for
torch.cuda whose allocations are scripted, so every recorded figure is known by hand:

  context 600 MiB; set-up allocates 100 MiB (reserved 128 MiB); warm-up step 0 peaks at 500 MiB
  allocated (the reserve grows to 500 MiB and stays), step 1 at 400 MiB; steady steps 2-4 peak at
  300 MiB; steps take 1, 1, 2, 3, 2 s on a scripted clock.

Checks the document against those figures (steady and from-start peaks, device used, the median
step, tokens/s), the Trainer callback, the errors, and that traces/framework_report.py plans the
written run and finds it valid (exit 0).
usage: check_zerolens_record.py ZEROLENS"""
import json
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "traces"))
import zerolens_record  # noqa: E402

MIB = 1 << 20
TOTAL = 80 * 1024 * MIB
CONTEXT = 600 * MIB


class FakeCuda:
    def __init__(self):
        self.allocated = self.reserved = self.max_allocated = self.max_reserved = 0
        self.synchronized = 0

    def allocate(self, nbytes):
        self.allocated += nbytes
        self.reserved = max(self.reserved, self.allocated)
        self.max_allocated = max(self.max_allocated, self.allocated)
        self.max_reserved = max(self.max_reserved, self.reserved)

    def is_available(self): return True
    def current_device(self): return 0
    def synchronize(self, device=None): self.synchronized += 1
    def memory_allocated(self, device=None): return self.allocated
    def memory_reserved(self, device=None): return self.reserved
    def max_memory_allocated(self, device=None): return self.max_allocated
    def max_memory_reserved(self, device=None): return self.max_reserved
    def mem_get_info(self, device=None): return TOTAL - CONTEXT - self.reserved, TOTAL
    def memory_stats(self, device=None): return {"num_alloc_retries": 0, "segment.all.peak": 3}
    def get_device_name(self, device=None): return "Stand-in GPU"

    def reset_peak_memory_stats(self, device=None):
        self.max_allocated, self.max_reserved = self.allocated, self.reserved


class FakeTorch:
    __version__ = "0.0-standin"

    class version:
        cuda = "0.0"

    def __init__(self):
        self.cuda = FakeCuda()

    def zeros(self, count, device=None):
        self.cuda.allocate(512)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def expect(condition, message):
    if not condition:
        print("FAIL: " + message)
        sys.exit(1)


def expect_error(call, fragment):
    try:
        call()
    except zerolens_record.RecordError as error:
        expect(fragment in str(error), f"error '{error}' does not name '{fragment}'")
        return
    expect(False, f"no RecordError naming '{fragment}'")


STEP_PEAKS = [500 * MIB, 400 * MIB, 300 * MIB, 300 * MIB, 300 * MIB]
STEP_SECONDS = [1.0, 1.0, 2.0, 3.0, 2.0]


def one_step(torch, clock, index):
    base = torch.cuda.allocated
    torch.cuda.allocate(STEP_PEAKS[index] - base)
    torch.cuda.allocated = base + 50 * MIB  # what the step leaves: 150 MiB in all after step 0
    if index > 0:
        torch.cuda.allocated = base
    clock.now += STEP_SECONDS[index]


def record(torch, clock, use_callback, path):
    recorder = zerolens_record.RunRecorder("deepspeed", {"preset": "gpt2-tiny"}, 4, 64, "bf16", stage=3,
                                           deepspeed_config={"zero_optimization": {"stage": 3}}, torch=torch)
    torch.cuda.allocate(100 * MIB - 512)
    torch.cuda.reserved = 128 * MIB
    torch.cuda.max_reserved = 128 * MIB
    callback = recorder.trainer_callback(path) if use_callback else None
    if callback:
        callback.on_train_begin(None, None, None)
        callback.on_epoch_begin(None, None, None)  # an event the recorder does not use
    else:
        recorder.mark("set up")
    for index in range(5):
        if callback:
            callback.on_step_begin(None, None, None)
            one_step(torch, clock, index)
            callback.on_step_end(None, None, None)
            callback.on_log(None, None, None, logs={"loss": 5.0 - index})
        else:
            with recorder.step():
                one_step(torch, clock, index)
            recorder.record_loss(5.0 - index)
    if callback:
        callback.on_train_end(None, None, None)
    else:
        recorder.write(path, model={"preset": "gpt2-tiny", "parameter_count": 124672})
    with open(path) as f:
        return json.load(f)


def check_document(doc, name):
    expect(doc["schema"] == "zerolens.framework-reference" and doc["version"] == 1, f"{name}: schema")
    expect(doc["points"][0]["point"] == "context" and doc["points"][1]["point"] == "set up", f"{name}: points")
    expect(doc["points"][0]["device_used"] == CONTEXT + 512, f"{name}: context point {doc['points'][0]}")
    expect(doc["from_start"]["max_allocated"] == 500 * MIB, f"{name}: from-start peak {doc['from_start']}")
    expect(doc["steady"]["max_allocated"] == 300 * MIB, f"{name}: steady peak {doc['steady']}")
    expect(doc["steady"]["max_reserved"] == 500 * MIB, f"{name}: steady reserve {doc['steady']}")
    expect(doc["steady"]["device_used_after_steps"] == CONTEXT + 500 * MIB, f"{name}: device used {doc['steady']}")
    expect(doc["median_step_s"] == 2.0 and doc["tokens_per_s"] == 4 * 64 / 2.0, f"{name}: timing {doc['step_s']}")
    expect(doc["losses"] == [5.0, 4.0, 3.0, 2.0, 1.0], f"{name}: losses {doc['losses']}")
    expect(doc["deepspeed_config"] == {"zero_optimization": {"stage": 3}}, f"{name}: config")


def main(zerolens):
    clock = Clock()
    zerolens_record.time.perf_counter = clock
    with tempfile.TemporaryDirectory() as scratch:
        loop = record(FakeTorch(), clock, False, os.path.join(scratch, "loop.json"))
        check_document(loop, "training loop")
        hooked = record(FakeTorch(), clock, True, os.path.join(scratch, "callback.json"))
        check_document(hooked, "Trainer callback")
        report = subprocess.run([sys.executable, os.path.join(here, "..", "traces", "framework_report.py"),
                                 "--zerolens", zerolens, os.path.join(scratch, "loop.json")],
                                capture_output=True, text=True)
        expect(report.returncode == 0 and "| gpt2-tiny | deepspeed ZeRO-3 |" in report.stdout,
               f"framework_report: exit {report.returncode}\n{report.stdout}\n{report.stderr}")
    torch = FakeTorch()
    expect_error(lambda: zerolens_record.RunRecorder("megatron", {"preset": "x"}, 1, 1, "bf16", torch=torch),
                 "framework")
    expect_error(lambda: zerolens_record.RunRecorder("torch", {}, 1, 1, "bf16", torch=torch), "model")
    expect_error(lambda: zerolens_record.RunRecorder("torch", {"preset": "x"}, 0, 1, "bf16", torch=torch),
                 "micro_batch")
    expect_error(lambda: zerolens_record.RunRecorder("torch", {"preset": "x"}, 1, 1, "int8", torch=torch),
                 "precision")
    early = zerolens_record.RunRecorder("torch", {"preset": "x"}, 1, 1, "bf16", torch=torch)
    with early.step():
        pass
    expect_error(early.document, "at least warmup + 1")
    torch.cuda.is_available = lambda: False
    expect_error(lambda: zerolens_record.RunRecorder("torch", {"preset": "x"}, 1, 1, "bf16", torch=torch), "CUDA")
    print("ok: figures as worked by hand (loop and Trainer callback), report valid, 6 errors named")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
