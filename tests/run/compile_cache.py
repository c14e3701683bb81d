#!/usr/bin/env python3
"""The persistent compilation cache (runtime/DiskCache.h) with `tsr run` on the CPU:

1. a first run into an empty cache folder writes entries; a second run of the same program
   compiles nothing (every program a hit, no miss) and prints the same output;
2. a corrupted entry is removed with a warning, recompiled, and the output is the same;
3. a cache folder that cannot be written gives one warning and the same output;
4. `--no-cache` reads nothing (misses only) — what the negative control relies on;
5. debug mode's checked kernels are entries of their own (their Tile IR, the key, holds the
   checks): after a run without --debug, a --debug run of debug_kernel_index.tsr misses its
   kernel (and reports the index) while its graph steps hit; a second --debug run misses nothing.

Every step compiles every kernel step at its first call (TSR_JIT_THRESHOLD=0). Ends with
`N passed, N failed`.

usage: compile_cache.py TSR [--expect-second-run-misses]
(--expect-second-run-misses: the negative control: the second run uses --no-cache, so check 1
must fail.)
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import run, summary  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "train_mlp.tsr")
STATS = re.compile(r"^cache .*: (\d+) hits, (\d+) misses, (\d+) writes, (\d+) corrupt, (\d+) evicted$", re.M)


def tsr_run(tsr, cache, *extra, program=PROGRAM):
    env = dict(os.environ, TSR_CACHE_DIR=cache, TSR_CACHE_STATS="1", TSR_JIT_THRESHOLD="0")
    env.pop("TSR_NO_CACHE", None)
    r = run([tsr, "run", program, "--device", "cpu", *extra], env=env, timeout=600)
    m = STATS.search(r.stderr)
    stats = tuple(int(x) for x in m.groups()) if m else None
    return r, stats


def main():
    tsr = os.path.abspath(sys.argv[1])
    negative = "--expect-second-run-misses" in sys.argv[2:]
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        passed += ok
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}")

    with tempfile.TemporaryDirectory() as cache:
        r1, s1 = tsr_run(tsr, cache)
        check(r1.ok and s1 is not None and s1[2] > 0, f"first run writes entries: {s1} {r1.crash or ''}")
        r2, s2 = tsr_run(tsr, cache, *(["--no-cache"] if negative else []))
        check(r2.ok and s2 is not None and s2[0] > 0 and s2[1] == 0,
              f"second run compiles nothing (hits > 0, misses 0): {s2}")
        check(r2.stdout == r1.stdout, "second run prints the same output")
        # Corrupt one entry: flip a byte in the middle.
        entries = [os.path.join(d, f) for d, _, fs in os.walk(cache) for f in fs if f.endswith(".bin")]
        if entries:
            with open(entries[0], "r+b") as f:
                data = bytearray(f.read())
                data[len(data) // 2] ^= 0x40
                f.seek(0)
                f.write(data)
        r3, s3 = tsr_run(tsr, cache)
        check(r3.ok and "is corrupt" in r3.stderr and s3 is not None and s3[3] == 1 and s3[2] == 1,
              f"a corrupt entry is removed with a warning and rewritten: {s3}")
        check(r3.stdout == r1.stdout, "after the corrupt entry, the same output")
    with tempfile.TemporaryDirectory() as parent:
        # A regular file where the cache folder's parent should be: no process can create the
        # folder, root included.
        blocker = os.path.join(parent, "blocker")
        open(blocker, "w").close()
        r4, s4 = tsr_run(tsr, os.path.join(blocker, "cache"))
        check(r4.ok and r4.stderr.count("cannot write the compilation cache") == 1,
              "an unwritable cache folder: one warning line")
        check(r4.stdout == r1.stdout, "with an unwritable cache folder, the same output")
    with tempfile.TemporaryDirectory() as cache:
        checked = os.path.join(HERE, "debug_kernel_index.tsr")
        r5, s5 = tsr_run(tsr, cache, program=checked)
        r6, s6 = tsr_run(tsr, cache, "--debug", program=checked)
        check(r5.ok and r6.returncode == 1 and "index out of bounds" in r6.stderr and s6 is not None and s6[1] >= 1 and s6[0] >= 1,
              f"--debug after a run without: its checked kernel misses, its graph steps hit: {s5} then {s6}")
        r7, s7 = tsr_run(tsr, cache, "--debug", program=checked)
        check(r7.returncode == 1 and s7 is not None and s7[1] == 0, f"a second --debug run misses nothing: {s7}")
    return summary(passed, failed, minimum=9)


if __name__ == "__main__":
    sys.exit(main())
