#!/usr/bin/env python3
"""ctest deterministic_cpu: `tsr run --deterministic` gives bit-identical results run after run on
the CPU's worker threads, where a normal run does not.

    deterministic.py TSR

atomic_sum.tsr adds 4M floats into one through tile.atomic_add from 4,096 programs on every
core, 16 times (programs of 1024 elements each: long enough that the threads overlap even on a
loaded machine). With --deterministic, two runs must write the same bytes (and print argmax's first
index of each tie). Its negative control: without --deterministic, runs (up to 20) must give at
least two different sums, or the test could not tell the mode from luck: it fails saying so.
Needs at least two cores (skips with exit 77 otherwise)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import run, Tally  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
tsr = os.path.abspath(sys.argv[1])
program = os.path.join(here, "atomic_sum.tsr")
tally = Tally()
report = tally.report


def sums(work, flags, n, stop_when_two=False):
    """The bytes each run wrote (and the runs' failures)."""
    seen, problems = [], []
    for i in range(n):
        out = os.path.join(work, f"acc{len(os.listdir(work))}.npy")
        p = run([tsr, "run", program, "--out", out] + flags, cwd=work, timeout=300)
        if not p.ok or p.crash:
            problems.append(f"exit {p.returncode}: {p.stderr.strip()[-400:]}")
            continue
        if "argmax tensor([1, 1], dtype=i64)" not in p.stdout:
            problems.append("argmax of the ties is not the first index: " + p.stdout.strip())
        seen.append(open(out, "rb").read())
        if stop_when_two and len(set(seen)) > 1:
            break
    return seen, problems


if (os.cpu_count() or 1) < 2:
    print("SKIP deterministic_cpu: one core, no threads to race")
    sys.exit(77)
with tempfile.TemporaryDirectory() as work:
    det, problems = sums(work, ["--deterministic"], 2)
    report(not problems and len(det) == 2 and det[0] == det[1], "--deterministic: two runs, the same bits",
           "; ".join(problems) or "the two runs wrote different sums")
    free, problems = sums(work, [], 20, stop_when_two=True)
    report(not problems and len(set(free)) > 1, "control: without --deterministic the sums differ between runs",
           "; ".join(problems) or f"{len(free)} runs gave one sum: the test cannot tell the mode from luck")
sys.exit(tally.summary(minimum=2, what="checks"))
