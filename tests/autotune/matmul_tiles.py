#!/usr/bin/env python3
"""Autotuning of graph code's matrix products on the CPU (exec/MatMulTuning.h), with
matmul_tiles.tsr, one @jit product of f32 [M, K] @ [K, N]:

- tune:      `--autotune=full` on a 512 x 1024 x 1024 product (2^30 flops, the threshold)
             times the schedule's 4 tile candidates and records a winner in
             TSR_CACHE_DIR/autotune; its output equals the `--autotune=off` run's (the
             heuristic's tiles);
- reuse:     a second process under `--autotune=cached` reads the record, times nothing and
             compiles nothing (no cache miss), and prints the same;
- values:    a record whose winner is made 64x64x64 (not the heuristic's 128x64x128) is taken
             and gives the heuristic's values bit for bit;
- key:       another shape (1024 x 512 x 1024) finds no record and is tuned anew;
- threshold: a product below 2^30 flops (256^3) is not timed under full;
- bundle:    a bundle traced after tuning (the record's winner made 64x64x64) carries the winner
             in its manifest's `autotune` and its program: the runner without a compiler
             (tsr-run-bundle), with an empty cache, takes it without timing and prints the same.

On a GPU (--device cuda, tools/gpu/suite.sh) the product is bf16 (the tensor cores' candidates:
128x256x64 and 128x128x64), the recorded winner is made 128x256x64, values compare to 1% (the
tiles may round the accumulation differently), and the bundle section is left out (a GPU's records
are not carried).

usage: matmul_tiles.py TSR TSRC RUNNER [--device cpu|cuda] [--break=off|nocache|grid|key|threshold|bundle]
--break runs the section the break concerns with the feature broken (the negative controls):
off: the first run uses --autotune=off; nocache: the second run uses --no-cache; grid, key,
threshold: TSR_AUTOTUNE_TEST_BREAK (grid: the chosen program runs over the heuristic's grid);
bundle: the bundle is made without the cache (TSR_NO_CACHE=1).
Ends with `N passed, N failed`.
"""
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from autotune import env_for, records, rewrite_payload  # noqa: E402
from testlib import run, summary  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "matmul_tiles.tsr")
STATS = re.compile(r"^cache .*: (\d+) hits, (\d+) misses, (\d+) writes, (\d+) corrupt, (\d+) evicted$", re.M)
TILES = r"BM=\d+ BN=\d+ BK=\d+"


DEVICE = "cpu"


def tsr_run(tsr, cache, *flags, **extra):
    dtype = ["--dtype", "bf16"] if DEVICE == "cuda" else []
    r = run([tsr, "run", PROGRAM, "--device", DEVICE, *dtype, *flags], env=env_for(cache, **extra), timeout=600)
    m = STATS.search(r.stderr)
    r.stats = tuple(int(x) for x in m.groups()) if m else None
    return r


def timed(stderr):
    """{tiles: ms} of the report's timing lines."""
    return {m.group(1): float(m.group(2)) for m in re.finditer(rf"^autotune:   ({TILES}): ([0-9.]+) ms \(\d+ runs\)$", stderr, re.M)}


def winner(stderr, shape):
    m = re.search(rf"^autotune: matmul {shape} .*: (?:winner )?({TILES}) \((?:recorded|[0-9.]+ ms)", stderr, re.M)
    return m.group(1) if m else None


def same_values(a, b):
    """Whether two outputs of matmul_tiles.tsr agree: bit for bit on the CPU, the elements to 1% on
    a GPU."""
    if DEVICE == "cpu":
        return a == b
    x = [float(v) for v in re.findall(r"c\w+ (\S+)", a)]
    y = [float(v) for v in re.findall(r"c\w+ (\S+)", b)]
    return len(x) == 3 and len(x) == len(y) and all(abs(p - q) <= 1e-2 * max(1.0, abs(p), abs(q)) for p, q in zip(x, y))


def main():
    global DEVICE
    tsr, tsrc, runner = (os.path.abspath(a) for a in sys.argv[1:4])
    broken = next((a.split("=", 1)[1] for a in sys.argv[4:] if a.startswith("--break=")), None)
    if "--device" in sys.argv:
        DEVICE = sys.argv[sys.argv.index("--device") + 1]
    gpu = DEVICE != "cpu"
    count = 2 if gpu else 4
    dt = "bf16" if gpu else "f32"
    forced = "BM=128 BN=256 BK=64" if gpu else "BM=64 BN=64 BK=64"
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        passed += bool(ok)
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}")

    def section(*breaks):
        return broken is None or broken in breaks

    shape = "M=512 N=1024 K=1024 batch=1"
    with tempfile.TemporaryDirectory() as cache:
        plain = tsr_run(tsr, cache, "--autotune=off")
        check(plain.ok and plain.stdout.startswith("mm 512x1024x1024 sum") and "autotune: matmul" not in plain.stderr,
              f"--autotune=off takes the heuristic's tiles and reports nothing ({plain.crash or 'rc ' + str(plain.returncode)})")
        if section("off", "nocache", "grid"):
            r1 = tsr_run(tsr, cache, "--autotune=off" if broken == "off" else "--autotune=full")
            t = timed(r1.stderr)
            w1 = winner(r1.stderr, shape)
            check(r1.ok and len(t) == count and f"matmul {shape} ({dt} {dt} {dt}) on {DEVICE}" in r1.stderr and w1 in t and
                  t[w1] == min(t.values()) and len(records(cache)) == 1,
                  f"full times the {count} tile candidates, records the fastest: {t}, winner {w1}, {len(records(cache))} record(s)")
            check(r1.ok and same_values(r1.stdout, plain.stdout), f"the tuned run prints the untuned run's values: {r1.stdout.strip()!r}")
            if broken not in ("off", "grid"):
                r2 = tsr_run(tsr, cache, "--autotune=cached", *(["--no-cache"] if broken == "nocache" else []))
                check(r2.ok and "timing" not in r2.stderr and re.search(rf"matmul {shape} .*\(recorded in .*\), nothing timed", r2.stderr) and
                      winner(r2.stderr, shape) == w1 and r2.stats is not None and r2.stats[1] == 0,
                      f"a second process with cached takes the record {winner(r2.stderr, shape)}, times and compiles nothing (cache {r2.stats})")
                check(r2.ok and same_values(r2.stdout, plain.stdout), "the second process prints the same values")
            if section("grid") and broken != "off":
                # Another winner than the heuristic's, by rewriting the record.
                for path in records(cache):
                    rewrite_payload(path, lambda p: re.sub(rb"winner BM=\d+ BN=\d+ BK=\d+", b"winner " + forced.encode(), p))
                extra = {"TSR_AUTOTUNE_TEST_BREAK": "grid"} if broken == "grid" else {}
                r3 = tsr_run(tsr, cache, "--autotune=cached", **extra)
                check(r3.ok and winner(r3.stderr, shape) == forced and same_values(r3.stdout, plain.stdout),
                      f"a recorded winner {forced} (not the heuristic's) runs and gives the heuristic's values: {r3.stdout.strip()!r}")

    if section("key"):
        with tempfile.TemporaryDirectory() as cache:
            extra = {"TSR_AUTOTUNE_TEST_BREAK": "key"} if broken == "key" else {}
            a = tsr_run(tsr, cache, "--autotune=full", **extra)
            b = tsr_run(tsr, cache, "--autotune=full", "--m", "1024", "--n", "512", **extra)
            check(a.ok and b.ok and re.search(rf"autotune: matmul M=1024 N=512 K=1024 batch=1 .*: timing {count} configurations", b.stderr) and
                  len(timed(b.stderr)) == count and len(records(cache)) == 2,
                  f"another shape finds no record and is tuned anew ({len(records(cache))} records)")

    if section("threshold"):
        with tempfile.TemporaryDirectory() as cache:
            extra = {"TSR_AUTOTUNE_TEST_BREAK": "threshold"} if broken == "threshold" else {}
            s = tsr_run(tsr, cache, "--autotune=full", "--m", "256", "--n", "256", "--k", "256", **extra)
            check(s.ok and "timing" not in s.stderr and "products of 2^30 flops and more are timed" in s.stderr and
                  not records(cache),
                  "a product below 2^30 flops is not timed under full")
    if section("bundle") and not gpu:
        with tempfile.TemporaryDirectory() as work:
            cache = os.path.join(work, "cache")
            r1 = tsr_run(tsr, cache, "--autotune=full")
            for path in records(cache):
                rewrite_payload(path, lambda p: re.sub(rb"winner BM=\d+ BN=\d+ BK=\d+", b"winner BM=64 BN=64 BK=64", p))
            bundle = os.path.join(work, "mm.bundle")
            extra = {"TSR_NO_CACHE": "1"} if broken == "bundle" else {}
            mk = run([tsrc, PROGRAM, "-o", bundle, "--target", "cpu", "--trace", ""], env=env_for(cache, **extra), timeout=600)
            data = open(bundle, "rb").read() if os.path.exists(bundle) else b""
            m = re.search(rb'"autotune": \[.*?\n \]', data, re.S)
            carried = json.loads(m.group(0)[len(b'"autotune": '):]) if m else []
            check(r1.ok and mk.ok and any(c["kernel"] == "matmul" and c["shape"] == shape and c["config"] == [["BM", 64], ["BN", 64], ["BK", 64]]
                                          for c in carried),
                  f"the bundle's manifest carries the product's winner 64x64x64: {carried} {mk.crash or mk.stderr[-300:]}")
            r2 = run([runner, bundle], env=env_for(os.path.join(work, "fresh")), timeout=600, cwd=work)
            check(r2.ok and re.search(rf"matmul {shape} .*BM=64 BN=64 BK=64 \(from the bundle\), nothing timed", r2.stderr) and
                  r2.stdout == plain.stdout,
                  f"the runner without a compiler takes the bundle's winner without timing ({r2.crash or r2.stderr[-300:]})")
    return summary(passed, failed, minimum=1)


if __name__ == "__main__":
    sys.exit(main())
