#!/usr/bin/env python3
"""traces/measure_summary.py's table of every round's step time, on hand-made rounds.

Two configs over three rounds at a 15 % tolerance: errors worked by hand ((measured - predicted) /
predicted), how many runs each round had outside, the mean over all runs; a malformed rounds.tsv
is refused naming its line. Exit 0 when every check holds."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "traces"))
import measure_summary  # noqa: E402


def main():
    failures = []

    def check(condition, what):
        if not condition:
            failures.append(what)

    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "rounds.tsv")
        with open(path, "w") as f:
            # a: 10 ms predicted; 9, 12, 10 ms measured: -10 %, +20 %, 0 %.
            # b: 20 ms predicted; 16 ms in round 1 (-20 %), 21 ms in round 3 (+5 %), none in 2.
            f.write("a\t1\t0.009\t0.010\na\t2\t0.012\t0.010\na\t3\t0.010\t0.010\n"
                    "b\t1\t0.016\t0.020\nb\t3\t0.021\t0.020\n")
        rounds = measure_summary.read_rounds(path)
        check(sorted(rounds) == ["a", "b"], f"configs read: {sorted(rounds)}")
        lines = measure_summary.rounds_table(rounds, 0.15)
        text = "\n".join(lines)
        row_a = next(line for line in lines if line.startswith("| a |"))
        row_b = next(line for line in lines if line.startswith("| b |"))
        check("9.00 / 10.00 ms (-10.00 %)" in row_a and "12.00 / 10.00 ms (+20.00 %)" in row_a,
              f"row a: {row_a}")
        check(row_b.split(" | ")[2] == "-" and "16.00 / 20.00 ms (-20.00 %)" in row_b, f"row b: {row_b}")
        # |errors| 10, 20, 0, 20, 5: mean 11 %; outside 15 %: round 1 b, round 2 a.
        check("mean absolute error 11.00 % over 5 runs" in text, text)
        check("1 of 2 in round 1, 1 of 1 in round 2, 0 of 2 in round 3" in text, text)
        check(measure_summary.rounds_table({}, 0.15) == [], "no rounds, no table")
        with open(path, "a") as f:
            f.write("c\t1\t0.01\n")
        try:
            measure_summary.read_rounds(path)
            failures.append("a line of 3 fields was read")
        except SystemExit as error:
            check(":6:" in str(error) and "4 tab-separated fields" in str(error), f"refusal: {error}")
    for failure in failures:
        print("FAIL:", failure)
    print("measure_summary rounds:", "ok" if not failures else f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
