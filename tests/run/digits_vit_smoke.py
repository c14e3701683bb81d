#!/usr/bin/env python3
"""The main job, examples/digits_vit.tsr, trained briefly: `tsr run` on a subset of the digits
for a few epochs, checking that the output has one line per epoch, that the training loss falls,
that the accuracies are percentages, and that the curve is a well-formed SVG chart with one
polyline per series and one point per epoch. Then an unwritable --out path must fail with exit
code 1 (the program's error, not the device's) and a diagnostic at the write_text call.

usage: digits_vit_smoke.py TSR REPO_ROOT"""
import math
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import chart_problems  # noqa: E402

EPOCH = re.compile(r"^epoch +(\d+)/(\d+)  loss (\S+)  train_acc +([\d.]+)%  test_acc +([\d.]+)%  time ([\d.]+)s$")


def run(tsr, root, *flags):
    cmd = [tsr, "run", os.path.join(root, "examples", "digits_vit.tsr"),
           "--data", os.path.join(root, "examples", "data", "digits.csv.gz")] + list(flags)
    # The reference evaluator: this tests the program, and the compiled executor spends minutes
    # of LLVM compilation on this job's graphs on a 2-core machine before the first step runs
    # (docs/performance.md, "Main job"); compiled_vs_reference tests that executor.
    env = dict(os.environ, TSR_EXECUTOR="reference")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


def main():
    tsr, root = sys.argv[1], sys.argv[2]
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "curve.svg")
        epochs = 4
        p = run(tsr, root, "--epochs", str(epochs), "--train_limit", "320", "--batch", "32", "--out", out)
        if p.returncode != 0:
            print(f"FAIL: exit code {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
            return 1
        rows = [EPOCH.match(line) for line in p.stdout.splitlines()]
        rows = [m for m in rows if m]
        if [int(m.group(1)) for m in rows] != list(range(1, epochs + 1)):
            problems.append(f"expected epoch lines 1..{epochs}, got:\n{p.stdout}")
        else:
            losses = [float(m.group(3)) for m in rows]
            if not all(math.isfinite(v) for v in losses):
                problems.append(f"a loss is not finite: {losses}")
            # From near log(10) = 2.30 at initialisation, a working gradient and optimizer
            # lower the mean training loss clearly within a few epochs.
            elif not losses[-1] < losses[0] - 0.3:
                problems.append(f"the training loss did not fall: {losses}")
            for m in rows:
                for acc in (float(m.group(4)), float(m.group(5))):
                    if not 0.0 <= acc <= 100.0:
                        problems.append(f"an accuracy is not a percentage: {m.group(0)}")
            if not float(rows[-1].group(5)) > 30.0:
                problems.append(f"the test accuracy stayed near chance: {rows[-1].group(0)}")
        if not re.search(r"^final test accuracy [\d.]+% ", p.stdout, re.M):
            problems.append("no final test accuracy line")
        if "epoch" not in p.stderr:
            problems.append("no progress output on stderr")

        problems += chart_problems(out, ("loss", "train accuracy", "test accuracy"), epochs,
                                   ("epoch", "train loss", "train accuracy", "test accuracy"), "the curve")

        bad = os.path.join(tmp, "no-such-dir", "curve.svg")
        p = run(tsr, root, "--epochs", "1", "--train_limit", "64", "--batch", "64", "--out", bad)
        if p.returncode != 1:
            problems.append(f"an unwritable --out gave exit code {p.returncode}, not 1")
        if not re.search(r"digits_vit\.tsr:\d+:\d+: error: cannot write `.*no-such-dir/curve\.svg`", p.stderr):
            problems.append(f"an unwritable --out gave no diagnostic at write_text: {p.stderr}")

    for pr in problems:
        print("FAIL: " + pr)
    print("digits_vit smoke: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
