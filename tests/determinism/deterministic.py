#!/usr/bin/env python3
"""`tsr run --deterministic` gives bit-identical results run after run, where a normal run does
not: ctest deterministic_cpu on the CPU's worker threads, and the GPU suite's deterministic_gpu.

    deterministic.py TSR [--device cuda]

atomic_sum.tsr adds 4M floats into one through tile.atomic_add from 4,096 programs, 16 times
(programs of 1024 elements each: long enough that the CPU's threads overlap even on a loaded
machine). With --deterministic, two runs must write the same bytes (and print argmax's first index
of each tie). Its negative control: without --deterministic, runs (up to 20) must give at least
two different sums, or the test could not tell the mode from luck: on the CPU it fails saying so.
On a GPU the control only reports: the hardware's order may happen to repeat, and the mode's own
check does not depend on it (the PTX of the ordered atomics is checked without a GPU by ctest
ordered_atomics_ptx).

On the CPU it also checks that the mode keys the compilation cache (a fresh TSR_CACHE_DIR): a
--deterministic run after a normal one compiles the kernel again (its program takes the ticket
of ordered atomics, ir/lower/kernel/AtomicOrder.cpp), and a second --deterministic run compiles
nothing. The CPU needs at least two cores (skips with exit 77 otherwise)."""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import run, Tally  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
tsr = os.path.abspath(sys.argv[1])
device = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--device" else "cpu"
program = os.path.join(here, "atomic_sum.tsr")
tally = Tally()
report = tally.report


def sums(work, flags, n, stop_when_two=False):
    """The bytes each run wrote (and the runs' failures)."""
    seen, problems = [], []
    for i in range(n):
        out = os.path.join(work, f"acc{len(os.listdir(work))}.npy")
        p = run([tsr, "run", program, "--device", device, "--out", out] + flags, cwd=work, timeout=300)
        if not p.ok or p.crash:
            problems.append(f"exit {p.returncode}: {p.stderr.strip()[-400:]}")
            continue
        if "argmax tensor([1, 1], dtype=i64)" not in p.stdout:
            problems.append("argmax of the ties is not the first index: " + p.stdout.strip())
        seen.append(open(out, "rb").read())
        if stop_when_two and len(set(seen)) > 1:
            break
    return seen, problems


def misses(work, flags):
    """The compilation cache's misses in one run (TSR_CACHE_STATS), or None if it failed."""
    env = dict(os.environ, TSR_CACHE_DIR=os.path.join(work, "cache"), TSR_CACHE_STATS="1")
    env.pop("TSR_NO_CACHE", None)
    p = run([tsr, "run", program, "--device", device, "--out", os.path.join(work, "c.npy"), "--launches", "1"] + flags,
            cwd=work, timeout=300, env=env)
    m = re.search(r"(\d+) misses", p.stderr + p.stdout)
    return int(m.group(1)) if p.ok and m else None


if device == "cpu" and (os.cpu_count() or 1) < 2:
    print("SKIP deterministic_cpu: one core, no threads to race")
    sys.exit(77)
with tempfile.TemporaryDirectory() as work:
    det, problems = sums(work, ["--deterministic"], 2)
    report(not problems and len(det) == 2 and det[0] == det[1], f"--deterministic on {device}: two runs, the same bits",
           "; ".join(problems) or "the two runs wrote different sums")
    free, problems = sums(work, [], 20, stop_when_two=True)
    differ = not problems and len(set(free)) > 1
    if device == "cpu":
        report(differ, "control: without --deterministic the sums differ between runs",
               "; ".join(problems) or f"{len(free)} runs gave one sum: the test cannot tell the mode from luck")
        plain, first, again = misses(work, []), misses(work, ["--deterministic"]), misses(work, ["--deterministic"])
        report(plain is not None and first is not None and first > 0 and again == 0,
               "the mode keys the compilation cache: compiled again once, then found",
               f"misses: {plain} without the mode, then {first} and {again} with it")
    else:
        report(not problems, f"control: runs without --deterministic on {device} succeed", "; ".join(problems))
        print(f"   without --deterministic: {len(set(free))} different sums in {len(free)} runs"
              + ("" if differ else " (the hardware's order repeated: allowed, this control only reports)"))
sys.exit(tally.summary(minimum=3 if device == "cpu" else 2, what="checks"))
