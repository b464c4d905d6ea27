#!/usr/bin/env python3
"""ctest python.module: the Python module against the CLI (a second front end over the same sim):
plan(), compare(), trace() and sweep() return what `zerolens plan [--compare]|trace|sweep --json`
prints for the same flags; a DeepSpeed config given as a dict plans as the same file; bad keywords and values raise
TypeError or zerolens.InputError (a ValueError) naming them.
usage: check_module.py ZEROLENS   (the module on PYTHONPATH)"""
import json
import os
import subprocess
import sys
import tempfile
import warnings

import zerolens

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


def cli_json(zerolens_binary, *arguments):
    result = subprocess.run([zerolens_binary, *arguments], capture_output=True, text=True, timeout=120)
    if result.returncode not in (0, 1):
        sys.exit(f"FAIL: zerolens {' '.join(arguments)}: exit {result.returncode}\n{result.stderr}")
    return json.loads(result.stdout)


def expect_error(kind, words, **keywords):
    try:
        zerolens.plan(**keywords)
    except kind as error:
        for word in words:
            check(word in str(error), f"{keywords}: '{word}' not in the error: {error}")
        return
    except Exception as error:  # noqa: BLE001 - the wrong kind of error is a failure too
        failures.append(f"{keywords}: {type(error).__name__} ({error}), expected {kind.__name__}")
        return
    failures.append(f"{keywords}: no error, expected {kind.__name__}")


def main(binary):
    flags = ["--model", "llama2-7b", "--gpus", "16", "--stage", "3", "--precision", "bf16", "--micro-batch", "2",
             "--offload-optimizer", "cpu", "--activation-checkpointing", "true"]
    keywords = dict(model="llama2-7b", gpus=16, stage=3, precision="bf16", micro_batch=2, offload_optimizer="cpu",
                    activation_checkpointing=True)
    check(zerolens.plan(**keywords) == cli_json(binary, "plan", *flags, "--json"), "plan() differs from plan --json")

    compared = zerolens.compare(**keywords)
    check(compared == cli_json(binary, "plan", *flags, "--compare", "--json"),
          "compare() differs from plan --compare --json")
    check([v["variant"] for v in compared["variants"]][:4] == ["DP", "ZeRO-1", "ZeRO-2", "ZeRO-3"],
          f"compare() variants {[v['variant'] for v in compared['variants']]}")
    check(compared["left_out"] == [], f"compare() left out {compared['left_out']}")
    # Under a pipeline DeepSpeed runs stage 0 or 1: compare() leaves ZeRO-2/3 out, saying why.
    piped = zerolens.compare(model="gpt2-124m", gpus=8, pp=2, stage=1, precision="bf16")
    check([v["variant"] for v in piped["variants"]] == ["DP", "ZeRO-1", "ZeRO-1 + opt:cpu"],
          f"compare(pp=2) variants {[v['variant'] for v in piped['variants']]}")
    check(len(piped["left_out"]) == 7 and
          all("pipeline engine runs ZeRO stage 0 or 1" in row["reason"] for row in piped["left_out"]),
          f"compare(pp=2) left out {piped['left_out']}")
    expect_compare_error = [False]
    try:
        zerolens.compare(stagee=3)
    except TypeError as error:
        expect_compare_error[0] = "did you mean 'stage'" in str(error)
    check(expect_compare_error[0], "compare() took an unknown keyword")

    trace = zerolens.trace(**keywords, ranks=2, compute_efficiency=0.4)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "trace.json")
        subprocess.run([binary, "trace", *flags, "--ranks", "2", "--compute-efficiency", "0.4", "-o", path],
                       check=True, capture_output=True, timeout=120)
        with open(path) as f:
            check(trace == json.load(f), "trace() differs from trace -o")

        config = {"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": True},
                  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
        config_path = os.path.join(directory, "ds.json")
        with open(config_path, "w") as f:
            json.dump(config, f)
        from_dict = zerolens.plan(model="gpt2-1.5b", gpus=8, deepspeed_config=config)
        check(from_dict == zerolens.plan(model="gpt2-1.5b", gpus=8, deepspeed_config=config_path),
              "a config as a dict plans differently from the same file")
        check(from_dict["run"]["micro_batch_per_gpu"] == 4, "the dict's micro-batch was not read")

    sweep_flags = ["--model", "llama2-7b", "--gpus", "16", "--precision", "bf16", "--seq-len", "2048",
                   "--train-batch", "64", "--tp-sizes", "1,2", "--pp-sizes", "1,2", "--jobs", "2"]
    swept = zerolens.sweep(model="llama2-7b", gpus=16, precision="bf16", seq_len=2048, train_batch=64,
                           tp_sizes=[1, 2], pp_sizes=[1, 2], jobs=2)
    check(swept == cli_json(binary, "sweep", *sweep_flags, "--json", "-q"), "sweep() differs from sweep --json")
    check(len(swept["families"]) == 4, f"{len(swept['families'])} layouts, expected 4")
    # Without a batch both front ends assume the same one (8 per GPU) and say so.
    defaulted = zerolens.sweep(model="gpt2-124m", gpus=8, stages=[1], optimizer_offloads=["none"],
                               param_offloads=["none"], checkpointing=[False], jobs=1)
    check(defaulted == cli_json(binary, "sweep", "--model", "gpt2-124m", "--gpus", "8", "--stages", "1",
                                "--optimizer-offloads", "none", "--param-offloads", "none", "--checkpointing",
                                "off", "--jobs", "1", "--json", "-q"), "a sweep without a batch differs from the CLI's")
    check(defaulted["train_batch_size"] == 64 and "8 per GPU" in defaulted["notes"][0], str(defaulted["notes"]))

    # LoRA and QLoRA: the same keywords, targets also as PEFT's list of module names.
    lora_flags = ["--model", "llama2-7b", "--gpus", "2", "--stage", "3", "--precision", "bf16", "--lora-rank", "16",
                  "--lora-targets", "q_proj,k_proj,v_proj,o_proj", "--quantize-base", "nf4", "--json"]
    lora = zerolens.plan(model="llama2-7b", gpus=2, stage=3, precision="bf16", lora_rank=16,
                         lora_targets=["q_proj", "k_proj", "v_proj", "o_proj"], quantize_base="nf4")
    check(lora == cli_json(binary, "plan", *lora_flags), "plan(lora_...) differs from plan --lora-rank --json")
    check(lora["model"]["trainable_parameter_count"] == 32 * 4 * 16 * (4096 + 4096),
          f"trainable {lora['model']['trainable_parameter_count']}")
    expect_error(ValueError, ["--lora-targets", "did you mean 'q_proj'"], model="llama2-7b", lora_rank=8,
                 lora_targets="q_prj")
    expect_error(ValueError, ["--quantize-base", "--lora-rank"], quantize_base="nf4")
    expect_error(TypeError, ["lora_targets"], lora_rank=8, lora_targets=3)

    # T5: the target sequence as a keyword.
    t5 = zerolens.plan(model="t5-small", gpus=2, stage=2, precision="bf16", seq_len=512, target_seq_len=64)
    check(t5 == cli_json(binary, "plan", "--model", "t5-small", "--gpus", "2", "--stage", "2", "--precision", "bf16",
                         "--seq-len", "512", "--target-seq-len", "64", "--json"),
          "plan(target_seq_len=...) differs from plan --target-seq-len --json")
    check(t5["run"]["target_seq_len"] == 64, f"run {t5['run']}")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        zerolens.plan(set={"zero_optimization.not_a_key": 1})
    check(any("not_a_key" in str(w.message) for w in caught), "an unknown DeepSpeed key was not warned about")

    expect_error(TypeError, ["stagee", "did you mean 'stage'"], stagee=3)
    expect_error(TypeError, ["stage", "int", "str"], stage="3")
    expect_error(TypeError, ["gpus", "bool"], gpus=True)
    expect_error(TypeError, ["deepspeed_config"], deepspeed_config=5)
    expect_error(zerolens.InputError, ["zero_optimization.stage"], stage=7)
    expect_error(ValueError, ["offload_optimizer", "disk"], offload_optimizer="disk")
    expect_error(ValueError, ["model", "did you mean"], model="llama2-7")
    for call, keywords, word in ((zerolens.trace, dict(ranks=0), "ranks"),
                                 (zerolens.trace, dict(compute_efficiency=0), "compute_efficiency"),
                                 (zerolens.trace, dict(algorithm="butterfly"), "algorithm"),
                                 (zerolens.sweep, dict(jobs=0), "jobs")):
        try:
            call(**keywords)
            failures.append(f"{keywords}: no error")
        except zerolens.InputError as error:
            check(word in str(error), f"{keywords}: '{word}' not in {error}")
    check(issubclass(zerolens.InputError, ValueError), "InputError is not a ValueError")
    check("gpt2-124m" in zerolens.presets()["models"], "presets() lacks gpt2-124m")

    if failures:
        sys.exit("FAIL:\n  " + "\n  ".join(failures))
    print("ok: plan, compare, trace and sweep agree with the CLI; errors name the keyword or key")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
