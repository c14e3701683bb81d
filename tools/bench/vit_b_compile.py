#!/usr/bin/env python3
"""The compile-time benchmark: a ViT-B/16 stack, forward and backward, cold and warm.

    vit_b_compile.py TSR [--runs N] [--threshold T]

Runs tools/bench/vit_b_compile.tsr (12 blocks, width 768, 12 heads, value_and_grad at batch
1 x 16 tokens) with `tsr run`, N times (default 3) each:
  - cold: with an empty persistent cache (a fresh TSR_CACHE_DIR), so every program compiles;
  - warm: again with the cache the cold run filled, so no program compiles.
Every kernel step is compiled at its first call (TSR_JIT_THRESHOLD=0, or T with --threshold).

For each it prints the process's wall time and CPU time (user + system, all threads: less
disturbed than wall time by other work on the machine), the program's own phases (init: the 85M parameters
drawn on the host; first: the first fwd+bwd call, which compiles; second: the same call again,
run time alone) and compile = first - second, the time the first call spent on compilation.
Medians over the runs are the summary line. The tensors are small, so a cold first call is
nearly all compilation.

Timings are noisy on a shared machine: run it while nothing else builds (the build machine's
engineers hold /tmp/tsr-build.lock: `flock /tmp/tsr-build.lock tools/bench/vit_b_compile.py ...`).
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


def arg(name, default):
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return default


def run(tsr, cache, threshold):
    env = dict(os.environ, TSR_CACHE_DIR=cache, TSR_JIT_THRESHOLD=str(threshold), TSR_CACHE_STATS="1")
    env.pop("TSR_NO_CACHE", None)
    t0 = time.perf_counter()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([tsr, "run", os.path.join(HERE, "vit_b_compile.tsr")], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    if r.returncode != 0:
        sys.exit("tsr run failed:\n" + r.stdout + r.stderr)
    phases = {}
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in ("init", "first", "second"):
            phases[parts[0]] = float(parts[1])
    stats = next((l for l in r.stderr.splitlines() if l.startswith("cache ")), "")
    phases["wall"] = wall
    phases["cpu"] = cpu
    phases["compile"] = phases["first"] - phases["second"]
    return phases, stats


def main():
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit(__doc__)
    tsr = sys.argv[1]
    runs = int(arg("--runs", "3"))
    threshold = int(arg("--threshold", "0"))
    cols = ["wall", "cpu", "init", "first", "second", "compile"]
    rows = {"cold": [], "warm": []}
    print("| run | " + " | ".join(cols) + " | cache |")
    print("|---" * (len(cols) + 2) + "|")
    for i in range(runs):
        cache = tempfile.mkdtemp(prefix="tsr-vit-cache-")
        try:
            for kind in ("cold", "warm"):
                p, stats = run(tsr, cache, threshold)
                rows[kind].append(p)
                print(f"| {kind} {i + 1} | " + " | ".join(f"{p[c]:.2f} s" for c in cols) + f" | {stats.split(': ', 1)[-1]} |")
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    for kind in ("cold", "warm"):
        med = {c: statistics.median(p[c] for p in rows[kind]) for c in cols}
        print(f"| {kind} median | " + " | ".join(f"{med[c]:.2f} s" for c in cols) + " | |")


if __name__ == "__main__":
    main()
