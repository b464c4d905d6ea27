#!/usr/bin/env python3
"""zerolens-record: records a real training run (DeepSpeed, PyTorch FSDP, Hugging Face Trainer, plain
PyTorch) as zerolens compares it with its prediction: GPU memory as the three figures a user sees
(torch.cuda.max_memory_allocated, max_memory_reserved, and device used = total - free from
cudaMemGetInfo, the CUDA context and every library included), over the steady-state steps and from
process start, at named points, plus step times and the caching allocator's counters. It writes a
zerolens.framework-reference document (version 1, the format of traces/framework_reference.py),
which `traces/framework_report.py` plans with zerolens and compares.

No dependency beyond PyTorch, and that only when recording. Copy this one file next to a training
script, or put traces/ on PYTHONPATH.

In a training loop:

    from zerolens_record import RunRecorder
    recorder = RunRecorder("deepspeed", {"preset": "gpt2-124m"}, micro_batch=4, seq_len=1024,
                           precision="bf16", deepspeed_config=ds_config)   # after CUDA is up
    engine, *_ = deepspeed.initialize(...)
    recorder.mark("set up")
    for batch in batches:
        with recorder.step():
            loss = engine(batch); engine.backward(loss); engine.step()
    recorder.write("run.json")

With the Hugging Face Trainer: `trainer.add_callback(recorder.trainer_callback("run.json"))`.
The model is named by a zerolens preset ({"preset": "gpt2-124m"}) or a Hugging Face config file
({"hf_config": "path/config.json"}); parameter_count is added when given.
"""
import contextlib
import json
import os
import statistics
import time

SCHEMA, VERSION = "zerolens.framework-reference", 1
FRAMEWORKS = ("deepspeed", "fsdp2", "torch")
PRECISIONS = ("fp32", "fp16", "bf16")
ALLOCATOR_STATS = ("allocated_bytes.all.peak", "reserved_bytes.all.peak", "allocated_bytes.large_pool.peak",
                   "allocated_bytes.small_pool.peak", "reserved_bytes.large_pool.peak",
                   "reserved_bytes.small_pool.peak", "segment.all.peak", "segment.large_pool.peak",
                   "segment.small_pool.peak", "num_alloc_retries", "num_ooms", "inactive_split_bytes.all.peak",
                   "active_bytes.all.peak", "requested_bytes.all.peak", "num_device_alloc", "num_device_free")


class RecordError(ValueError):
    pass


def _check_run(framework, model, micro_batch, seq_len, precision, warmup):
    if framework not in FRAMEWORKS:
        raise RecordError(f"framework: '{framework}' is not one of {', '.join(FRAMEWORKS)}")
    if not isinstance(model, dict) or not (model.get("preset") or model.get("hf_config")):
        raise RecordError("model: give {'preset': NAME} or {'hf_config': PATH}")
    if precision not in PRECISIONS:
        raise RecordError(f"precision: '{precision}' is not one of {', '.join(PRECISIONS)}")
    for name, value in (("micro_batch", micro_batch), ("seq_len", seq_len), ("warmup", warmup)):
        if not isinstance(value, int) or value < 1:
            raise RecordError(f"{name}: {value!r} is not a positive integer")


class RunRecorder:
    """GPU memory of one process's device at named points and around every step. Create it once CUDA
    is usable and before the model is built, so its first point is the CUDA context alone; the peaks
    from process start are PyTorch's since the process started."""

    def __init__(self, framework, model, micro_batch, seq_len, precision, *, deepspeed_config=None, stage=0,
                 offload_optimizer="none", offload_param="none", checkpointing=False, warmup=2, device=None,
                 torch=None):
        _check_run(framework, model, micro_batch, seq_len, precision, warmup)
        if torch is None:
            import torch  # only when recording
        if not torch.cuda.is_available():
            raise RecordError("no CUDA device (torch.cuda.is_available() is False)")
        self.torch = torch
        self.device = device if device is not None else torch.cuda.current_device()
        self.run = {"framework": framework, "model": dict(model), "micro_batch": micro_batch, "seq_len": seq_len,
                    "precision": precision, "stage": stage, "offload_optimizer": offload_optimizer,
                    "offload_param": offload_param, "checkpointing": checkpointing}
        if deepspeed_config is not None:
            self.run["deepspeed_config"] = deepspeed_config
        self.warmup, self.points, self.step_s, self.losses = warmup, [], [], []
        self.from_start, self.steady_from = None, None
        torch.zeros(1, device=self.device)  # the context, and the allocator's first block
        self.mark("context")

    def _device_used(self):
        free, total = self.torch.cuda.mem_get_info(self.device)
        return total - free

    def mark(self, name):
        cuda = self.torch.cuda
        cuda.synchronize(self.device)
        self.points.append({"point": name, "allocated": cuda.memory_allocated(self.device),
                            "reserved": cuda.memory_reserved(self.device), "device_used": self._device_used(),
                            "max_allocated": cuda.max_memory_allocated(self.device),
                            "max_reserved": cuda.max_memory_reserved(self.device)})

    def _begin_steady_state(self):
        """After the warm-up steps: keeps the peaks so far (from process start) and resets PyTorch's."""
        cuda = self.torch.cuda
        self.from_start = {"max_allocated": cuda.max_memory_allocated(self.device),
                           "max_reserved": cuda.max_memory_reserved(self.device)}
        cuda.reset_peak_memory_stats(self.device)
        self.steady_from = len(self.points)

    @contextlib.contextmanager
    def step(self):
        """Times one optimizer step (synchronised) and marks the memory after it."""
        if len(self.step_s) == self.warmup:
            self._begin_steady_state()
        self.torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        yield
        self.torch.cuda.synchronize(self.device)
        self.step_s.append(time.perf_counter() - start)
        self.mark(f"after step {len(self.step_s) - 1}")

    def record_loss(self, loss):
        self.losses.append(float(loss))

    def _peak_device_used(self, first=0):
        return max(p["device_used"] for p in self.points[first:])

    def document(self):
        """The zerolens.framework-reference document; RecordError before warm-up + 1 steps."""
        if len(self.step_s) <= self.warmup:
            raise RecordError(f"{len(self.step_s)} steps recorded: at least warmup + 1 = {self.warmup + 1} are needed")
        cuda = self.torch.cuda
        steady = {"max_allocated": cuda.max_memory_allocated(self.device),
                  "max_reserved": cuda.max_memory_reserved(self.device),
                  "device_used_after_steps": self._peak_device_used(self.steady_from)}
        from_start = {"max_allocated": max(self.from_start["max_allocated"], steady["max_allocated"]),
                      "max_reserved": max(self.from_start["max_reserved"], steady["max_reserved"]),
                      "device_used_after_steps": self._peak_device_used()}
        stats = cuda.memory_stats(self.device)
        median = statistics.median(self.step_s[self.warmup:])
        _, total = cuda.mem_get_info(self.device)
        return {"schema": SCHEMA, "version": VERSION, **self.run, "device": cuda.get_device_name(self.device),
                "device_memory_bytes": total, "torch": self.torch.__version__, "cuda": self.torch.version.cuda,
                "steps": len(self.step_s), "warmup": self.warmup, "points": self.points, "steady": steady,
                "from_start": from_start, "step_s": self.step_s, "median_step_s": median,
                "tokens_per_s": self.run["micro_batch"] * self.run["seq_len"] / median, "losses": self.losses,
                "allocator": {key: stats.get(key) for key in ALLOCATOR_STATS}}

    def write(self, path, **extra):
        """Writes the document (with `extra` keys) atomically: a complete file or none."""
        document = dict(self.document(), **extra)
        scratch = f"{path}.part"
        with open(scratch, "w") as f:
            f.write(json.dumps(document, indent=1) + "\n")
        os.replace(scratch, path)

    def trainer_callback(self, path):
        """A Hugging Face Trainer callback (duck-typed: transformers is not imported) that times every
        optimizer step and writes the document at the end of training."""
        return _TrainerCallback(self, path)


class _TrainerCallback:
    def __init__(self, recorder, path):
        self.recorder, self.path, self.step_context = recorder, path, None

    def __getattr__(self, name):  # every other Trainer event: nothing to do
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def on_train_begin(self, args, state, control, **kwargs):
        self.recorder.mark("set up")

    def on_step_begin(self, args, state, control, **kwargs):
        self.step_context = self.recorder.step()
        self.step_context.__enter__()

    def on_step_end(self, args, state, control, **kwargs):
        if self.step_context is not None:
            self.step_context.__exit__(None, None, None)
            self.step_context = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.recorder.record_loss(logs["loss"])

    def on_train_end(self, args, state, control, **kwargs):
        self.recorder.write(self.path)
