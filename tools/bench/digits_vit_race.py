#!/usr/bin/env python3
"""The main job against PyTorch: wall time to 95% test accuracy, side by side in one run.

    digits_vit_race.py TSR [--threads 2] [--epochs 30] [--target 0.95] [--rounds 1]

Runs `TSR run examples/digits_vit.tsr` (compiled executor, the device TSR_DEVICE names, default
cpu) twice, with an empty compilation cache (cold: every program compiled in that process) and
with the cache it filled (warm), and tools/bench/digits_vit_torch.py (the same model in PyTorch
with torch.set_num_threads(threads)), each in a fresh process, and reads their epoch lines as
they come. The time to the target is the wall time from starting the process (interpreter
start-up, imports, data loading, compilation included) to the end of the first epoch whose test
accuracy reaches it. Prints a Markdown table with both sides, their ratio (Tessera / PyTorch,
below 1: Tessera is faster), the epoch reached and the final accuracy, and which BLAS the torch
uses (Debian's build says BLAS_INFO=generic: the reference BLAS, slow for large GEMMs, though
this model's matrices are at most 64 wide). With --rounds N each side runs N times and the best
is shown.

Tessera's launches use every core the process may run on (its affinity mask), so on a machine
with more cores than --threads the comparison favours Tessera: the table says how many cores
(`taskset -c 0-1` pins both sides to two).
"""
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
EPOCH = re.compile(r"epoch\s+(\d+)/\d+\s+loss\s+\S+\s+train_acc\s+\S+%\s+test_acc\s+([\d.]+)%")
FINAL = re.compile(r"final test accuracy\s+([\d.]+)%")


def arg(name, default, kind=int):
    if name in sys.argv:
        return kind(sys.argv[sys.argv.index(name) + 1])
    return default


def race(cmd, target, env=None):
    """Runs cmd; returns (seconds to the target or None, epoch, final accuracy, total seconds)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                         env=env)
    reached, epoch, final = None, None, None
    for line in p.stdout:
        m = EPOCH.search(line)
        if m and reached is None and float(m.group(2)) / 100.0 >= target:
            reached, epoch = time.perf_counter() - t0, int(m.group(1))
        m = FINAL.search(line)
        if m:
            final = float(m.group(1))
    err = p.stderr.read()
    if p.wait() != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{err}")
    return reached, epoch, final, time.perf_counter() - t0


def blas_info(torch):
    m = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    return m.group(1) if m else "unknown"


def fmt(r):
    reached, epoch, final, total = r
    hit = f"{reached:.1f} s (epoch {epoch})" if reached is not None else "not reached"
    return f"{hit} | {final}% | {total:.1f} s"


def main():
    sys.path.insert(0, HERE)
    from digits_vit_torch import _ensure_torch
    _ensure_torch()
    import torch

    tsr = os.path.abspath(sys.argv[1])
    threads, epochs, rounds = arg("--threads", 2), arg("--epochs", 30), arg("--rounds", 1)
    target = arg("--target", 0.95, float)
    device = os.environ.get("TSR_DEVICE", "cpu")
    tsr_cmd = [tsr, "run", "examples/digits_vit.tsr", "--device", device, "--epochs", str(epochs),
               "--out", os.devnull]
    torch_cmd = [sys.executable, os.path.join(HERE, "digits_vit_torch.py"), "--threads", str(threads),
                 "--epochs", str(epochs)]

    def best(results):
        hit = [r for r in results if r[0] is not None]
        return min(hit, key=lambda r: r[0]) if hit else results[0]

    cold, warm, ref = [], [], []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="tsr-race-cache-") as cache:
            env = dict(os.environ, TSR_CACHE_DIR=cache)
            cold.append(race(tsr_cmd, target, env))
            warm.append(race(tsr_cmd, target, env))
        ref.append(race(torch_cmd, target))
    c, w, r = best(cold), best(warm), best(ref)

    def ratio(a):
        return f"{a[0] / r[0]:.2f}" if a[0] is not None and r[0] is not None else "-"
    print(f"digits ViT, {epochs} epochs, time to {target:.0%} test accuracy (process start to the end of "
          f"that epoch), best of {rounds}; Tessera on {device} ({len(os.sched_getaffinity(0))} cores), "
          f"PyTorch {torch.__version__} with {threads} threads, BLAS_INFO={blas_info(torch)}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print()
    print("| run | time to target | final test accuracy | whole process | ratio to PyTorch |")
    print("|---|---|---|---|---|")
    print(f"| Tessera, empty cache | {fmt(c)} | {ratio(c)} |")
    print(f"| Tessera, warm cache | {fmt(w)} | {ratio(w)} |")
    print(f"| PyTorch | {fmt(r)} | 1.00 |")


if __name__ == "__main__":
    main()
