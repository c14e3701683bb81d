#!/usr/bin/env python3
"""The scan compile-time benchmark (issue 20): a 12-layer transformer stack written as a scan
over stacked layer parameters must compile in under 1.5x the time of one layer.

    scan_compile.py TSR [--runs N] [--depth D]

Runs tools/bench/scan_compile.tsr with `tsr run` in three modes, N times each (default 3), each
from an empty persistent cache (a fresh TSR_CACHE_DIR) with every kernel step compiled at its
first call (TSR_JIT_THRESHOLD=0):
  - one:      one block, forward and backward (value_and_grad);
  - scan:     D blocks (default 12) as a scan over stacked parameters;
  - unrolled: D blocks as a Python loop (the form a scan replaces), for comparison.
For each it prints wall and CPU time of the process and the program's phases (first: the first
fwd+bwd call, which lowers and compiles; second: the same call again; compile = first - second),
then the medians and the ratios scan/one and unrolled/one of the compile times. Exits 1 when the
median scan/one ratio is 1.5 or more (the issue's bound).

Timings are noisy on a shared machine: run it while nothing else builds
(`flock /tmp/tsr-build.lock tools/bench/scan_compile.py build/tools/tsr/tsr`).
"""
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BOUND = 1.5


def arg(name, default):
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return default


def run(tsr, mode, depth):
    cache = tempfile.mkdtemp(prefix="tsr-scan-cache-")
    try:
        env = dict(os.environ, TSR_CACHE_DIR=cache, TSR_JIT_THRESHOLD="0")
        env.pop("TSR_NO_CACHE", None)
        env.pop("TSR_EXECUTOR", None)
        t0 = time.perf_counter()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run([tsr, "run", os.path.join(HERE, "scan_compile.tsr"), "--mode", mode, "--depth", str(depth)],
                           capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if r.returncode != 0:
        sys.exit(f"tsr run --mode {mode} failed:\n" + r.stdout + r.stderr)
    phases = {"wall": wall, "cpu": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)}
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in ("init", "first", "second"):
            phases[parts[0]] = float(parts[1])
        if parts and parts[0] == "loss":
            phases["loss"] = " ".join(parts[1:])
    phases["compile"] = phases["first"] - phases["second"]
    return phases


def main():
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit(__doc__)
    tsr = sys.argv[1]
    runs = int(arg("--runs", "3"))
    depth = int(arg("--depth", "12"))
    cols = ["wall", "cpu", "first", "second", "compile"]
    rows = {m: [] for m in ("one", "scan", "unrolled")}
    print("| mode | " + " | ".join(cols) + " | loss |")
    print("|---" * (len(cols) + 2) + "|")
    for i in range(runs):
        for mode in rows:
            p = run(tsr, mode, depth)
            rows[mode].append(p)
            print(f"| {mode} {i + 1} | " + " | ".join(f"{p[c]:.2f} s" for c in cols) + f" | {p.get('loss', '')} |", flush=True)
    med = {m: {c: statistics.median(p[c] for p in rows[m]) for c in cols} for m in rows}
    for m in rows:
        print(f"| {m} median | " + " | ".join(f"{med[m][c]:.2f} s" for c in cols) + " | |")
    ratio = med["scan"]["compile"] / med["one"]["compile"]
    unrolled = med["unrolled"]["compile"] / med["one"]["compile"]
    print(f"compile time, median: one layer {med['one']['compile']:.2f} s, scan of {depth} {med['scan']['compile']:.2f} s "
          f"({ratio:.2f}x), unrolled {depth} {med['unrolled']['compile']:.2f} s ({unrolled:.2f}x); bound {BOUND}x: "
          + ("met" if ratio < BOUND else "NOT met"))
    return 0 if ratio < BOUND else 1


if __name__ == "__main__":
    sys.exit(main())
