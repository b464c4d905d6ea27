#!/usr/bin/env python3
"""Tokens/s of zerolens's executor over PyTorch's for the same GPT-2, batch and precision (issue 6's
benchmark; target at least 0.9), from files written in one device session:

  zerolens run --device cuda --model gpt2-124m --seq-len 1024 --micro-batch 4 --precision bf16 \\
      --steps 10 --measured-trace zl.json
  python traces/torch_reference.py --preset gpt2-124m --seq-len 1024 --micro-batch 4 --precision bf16 \\
      --steps 10 --mode plain -o torch.json
  scripts/throughput-ratio.py zl.json torch.json

Prints both rates and the ratio; exit 0 when both files describe the same shape, 2 otherwise.
"""
import argparse
import json
import sys

TARGET = 0.9


def load(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as error:
        sys.exit(f"throughput-ratio: {what} {path}: {error}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("zerolens_trace", help="zerolens run/validate --measured-trace output")
    parser.add_argument("torch_json", help="traces/torch_reference.py -o output")
    parser.add_argument("--mode", default="plain", help="the torch run to compare with (default plain)")
    args = parser.parse_args(argv)
    trace = load(args.zerolens_trace, "zerolens trace")
    torch = load(args.torch_json, "torch reference")
    try:
        ours = float(trace["summary"]["tokens_per_s"])
        theirs = float(torch["runs"][args.mode]["tokens_per_s"])
        run = trace["run"]
    except (KeyError, TypeError, ValueError) as error:
        print(f"throughput-ratio: missing field {error}", file=sys.stderr)
        return 2
    tokens = torch.get("micro_batch", 0) * torch.get("seq_len", 0)
    ours_tokens = run.get("micro_batch", 0) * run.get("seq_len", 0)
    if tokens and ours_tokens and tokens != ours_tokens:
        print(f"throughput-ratio: {ours_tokens} tokens per step in zerolens, {tokens} in torch", file=sys.stderr)
        return 2
    if theirs <= 0:
        print("throughput-ratio: torch's tokens/s is not positive", file=sys.stderr)
        return 2
    ratio = ours / theirs
    print(f"zerolens {ours:.1f} tokens/s, torch ({args.mode}) {theirs:.1f} tokens/s: "
          f"ratio {ratio:.3f} (target {TARGET}: {'met' if ratio >= TARGET else 'not met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
