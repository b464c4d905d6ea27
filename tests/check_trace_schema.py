#!/usr/bin/env python3
"""Validates zerolens trace files against traces/zerolens.trace.schema.json with an independent
validator (python3-jsonschema), and checks that a broken trace is rejected.

usage: check_trace_schema.py SCHEMA TRACE..."""
import copy
import json
import sys

try:
    import jsonschema
except ImportError:  # scripts/install-deps.sh installs python3-jsonschema
    print("python3-jsonschema is not installed: skipped")
    sys.exit(77)


def main() -> int:
    schema = json.load(open(sys.argv[1]))
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for path in sys.argv[2:]:
        document = json.load(open(path))
        errors = list(validator.iter_errors(document))
        for error in errors[:10]:
            print(f"{path}: {'/'.join(map(str, error.absolute_path))}: {error.message}")
        if errors:
            return 1
        broken = copy.deepcopy(document)
        broken["ops"][0]["stream"] = "warp"  # the validator must notice
        if validator.is_valid(broken):
            print(f"{path}: a trace with an unknown stream was accepted")
            return 1
        print(f"{path}: valid ({len(document['ops'])} ops)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
