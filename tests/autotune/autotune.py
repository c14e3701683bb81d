#!/usr/bin/env python3
"""Autotuning of `@kernel.autotune` launches on the CPU (exec/Autotune.h), with autotune.tsr,
whose spaces put a slow configuration (BLOCK=1) first:

- tune:    `--autotune=full` times both configurations and picks BLOCK=256, the faster; the
           record lands in TSR_CACHE_DIR/autotune; a second process with `--autotune=cached`
           times nothing, compiles nothing (no cache miss) and takes the same; the CPU's default
           mode without a record takes the space's first and times nothing;
- skip:    a configuration whose lowering fails (BLOCK=2), or whose grid lambda fails (BM=1 in
           `gridfail`), is skipped with a note; the others win;
- graph:   a kernel_call in a graph function, whose grid lambda depends on the configuration, is
           tuned with each configuration's grid (the op's grid_space), and its record reused;
- scratch: a kernel that adds into its output (Out += ...) gives the same result tuned as untuned
           (the timing runs write scratch copies);
- key:     another value of a key dim (N=2048 after N=4096) finds no record and is tuned anew;
- corrupt: a damaged record file, and a well-formed one naming no configuration of the space, are
           ignored with a warning; the program's output is unchanged;
- bundle:  a bundle traced after tuning carries the winner (manifest "autotune"), and its run,
           with an empty cache, takes it without timing; `tsrc --autotune full --trace` tunes in
           its trace run and carries the winner.

usage: autotune.py TSR TSRC [--break=off|nocache|graph|scratch|key|skip|corrupt|bundle]
--break runs the section the break concerns with the feature broken (the negative controls):
off: the first run uses --autotune=off; nocache: the second run uses --no-cache; scratch, key,
skip, graph: TSR_AUTOTUNE_TEST_BREAK; corrupt: the records are left intact; bundle: the bundle is made
without the cache (TSR_NO_CACHE=1). Ends with `N passed, N failed`.
"""
import json
import os
import re
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import run, summary  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "autotune.tsr")
STATS = re.compile(r"^cache .*: (\d+) hits, (\d+) misses, (\d+) writes, (\d+) corrupt, (\d+) evicted$", re.M)


def env_for(cache, **extra):
    env = dict(os.environ, TSR_CACHE_DIR=cache, TSR_CACHE_STATS="1", TSR_AUTOTUNE_VERBOSE="1")
    for k in ("TSR_AUTOTUNE", "TSR_NO_CACHE", "TSR_AUTOTUNE_TEST_BREAK", "TSR_AUTOTUNE_REPORT"):
        env.pop(k, None)
    env.update(extra)
    return env


def tsr_run(tsr, cache, *flags, program=PROGRAM, cwd=None, **extra):
    r = run([tsr, "run", program, "--device", "cpu", *flags], env=env_for(cache, **extra), timeout=600, cwd=cwd)
    m = STATS.search(r.stderr)
    r.stats = tuple(int(x) for x in m.groups()) if m else None
    return r


def times(stderr, kernel):
    """{config: ms} of the report's lines after `kernel`'s "timing" line."""
    out, inside = {}, False
    for line in stderr.splitlines():
        m = re.match(r"autotune:   (.+?): ([0-9.]+) ms$", line)
        if m:
            if inside:
                out[m.group(1)] = float(m.group(2))
        elif line.startswith("autotune: "):
            inside = f"autotune.{kernel} " in line and "timing" in line
    return out


def winner(stderr, kernel):
    for line in stderr.splitlines():
        m = re.match(rf"autotune: autotune\.{kernel} .*: (?:winner )?((?:BM=\d+ )?BLOCK=\d+)(?: \(| \(recorded| \(from)", line)
        if m and ("winner" in line or "nothing timed" in line):
            return m.group(1)
    return None


def records(cache):
    d = os.path.join(cache, "autotune")
    return [os.path.join(d, f) for f in os.listdir(d)] if os.path.isdir(d) else []


def fnv1a64(data, seed=0xCBF29CE484222325):
    h = seed
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def rewrite_payload(path, edit):
    """Rewrites a DiskCache entry's payload (runtime/DiskCache.h's format), checksum included."""
    data = open(path, "rb").read()
    assert data[:8] == b"TSRCACHE"
    klen = struct.unpack_from("<Q", data, 12)[0]
    key = data[20:20 + klen]
    plen = struct.unpack_from("<Q", data, 20 + klen)[0]
    payload = edit(data[28 + klen:28 + klen + plen])
    out = data[:12] + struct.pack("<Q", klen) + key + struct.pack("<Q", len(payload)) + payload
    out += struct.pack("<Q", fnv1a64(payload, fnv1a64(key)))
    open(path, "wb").write(out)


def main():
    tsr, tsrc = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    broken = next((a.split("=", 1)[1] for a in sys.argv[3:] if a.startswith("--break=")), None)
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        passed += bool(ok)
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}")

    def section(name, *breaks):
        return broken is None or broken in breaks

    # tune, skip
    if section("tune", "off", "nocache", "skip"):
        with tempfile.TemporaryDirectory() as cache:
            extra = {"TSR_AUTOTUNE_TEST_BREAK": "skip"} if broken == "skip" else {}
            r1 = tsr_run(tsr, cache, "--autotune=off" if broken == "off" else "--autotune=full", **extra)
            t = times(r1.stderr, "row_sum")
            check(r1.ok and set(t) == {"BLOCK=1", "BLOCK=256"} and t["BLOCK=1"] > t["BLOCK=256"] and
                  winner(r1.stderr, "row_sum") == "BLOCK=256",
                  f"full times both configurations and picks the faster BLOCK=256: {t}, winner {winner(r1.stderr, 'row_sum')}")
            check(r1.ok and len(records(cache)) == 3, f"one record per tuned kernel in the cache's autotune folder: {len(records(cache))}")
            check(r1.ok and re.search(r"note: autotune: kernel `row_sum_broken`: configuration BLOCK=2 skipped: .*assert", r1.stderr) and
                  winner(r1.stderr, "row_sum_broken") == "BLOCK=256" and "row_sum_broken err" in r1.stdout,
                  f"a configuration that fails to lower is skipped with a note and another wins ({r1.crash or 'rc ' + str(r1.returncode)})")
            rg = tsr_run(tsr, cache, "--autotune=full", "--which", "gridfail", "--m", "100", **extra)
            check(rg.ok and rg.stderr.count("skipped: its grid: integer division by zero") == 2 and
                  winner(rg.stderr, "block_sum") in ("BM=16 BLOCK=1", "BM=16 BLOCK=256") and re.search(r"gridfail err [0-9.]+e-0[4-9]", rg.stdout),
                  f"configurations whose grid lambda fails are skipped with a note; another wins ({rg.crash or 'rc ' + str(rg.returncode)})")
            check(r1.ok and all(float(v) < 1e-3 for v in re.findall(r"err ([0-9.e+-]+)", r1.stdout)) and r1.stdout.count("err") == 3,
                  f"tuned launches compute the right sums: {r1.stdout.strip()!r}")
            if broken not in ("off", "skip"):
                r2 = tsr_run(tsr, cache, "--autotune=cached", *(["--no-cache"] if broken == "nocache" else []))
                check(r2.ok and "timing" not in r2.stderr and r2.stderr.count("nothing timed") == 3 and
                      winner(r2.stderr, "row_sum") == "BLOCK=256" and r2.stats is not None and r2.stats[1] == 0,
                      f"a second process with cached times and compiles nothing (cache {r2.stats}) and takes BLOCK=256")
                check(r2.stdout == r1.stdout, "the second process prints the same output")
        if broken is None:
            with tempfile.TemporaryDirectory() as cache:
                r3 = tsr_run(tsr, cache, "--which", "row_sum")
                check(r3.ok and "no record, the space's first BLOCK=1" in r3.stderr and "timing" not in r3.stderr,
                      "the CPU's default (cached) without a record takes the first and times nothing")

    # graph: a kernel_call in a graph function whose grid depends on the configuration
    if section("graph", "graph"):
        with tempfile.TemporaryDirectory() as cache:
            extra = {"TSR_AUTOTUNE_TEST_BREAK": "graph"} if broken == "graph" else {}
            g1 = tsr_run(tsr, cache, "--autotune=full", "--which", "graph", "--m", "100", **extra)
            t = times(g1.stderr, "block_sum")
            check(g1.ok and len(t) == 4 and winner(g1.stderr, "block_sum") is not None and
                  re.search(r"graph_sum err [0-9.]+e-0[4-9]", g1.stdout),
                  f"a graph function's kernel_call is tuned over its 4 configurations, each with its own grid (M=100): {t}")
            g2 = tsr_run(tsr, cache, "--autotune=cached", "--which", "graph", "--m", "100", **extra)
            check(g2.ok and "nothing timed" in g2.stderr and g2.stdout == g1.stdout,
                  "a second process takes the graph kernel's record without timing")

    # scratch
    if section("scratch", "scratch"):
        with tempfile.TemporaryDirectory() as cache:
            extra = {"TSR_AUTOTUNE_TEST_BREAK": "scratch"} if broken == "scratch" else {}
            tuned = tsr_run(tsr, cache, "--autotune=full", "--which", "into", **extra)
            # The same configuration again, from the record: one launch, nothing timed.
            plain = tsr_run(tsr, cache, "--autotune=cached", "--which", "into")
            check(tuned.ok and "timing 2 configurations" in tuned.stderr and "nothing timed" in plain.stderr and
                  tuned.stdout == plain.stdout and re.search(r"row_sum_into err [0-9.]+e-0[4-9]", tuned.stdout),
                  f"Out += ... tuned gives the result of one launch of the winner: {tuned.stdout.strip()!r} vs {plain.stdout.strip()!r}")

    # key
    if section("key", "key"):
        with tempfile.TemporaryDirectory() as cache:
            extra = {"TSR_AUTOTUNE_TEST_BREAK": "key"} if broken == "key" else {}
            a = tsr_run(tsr, cache, "--autotune=full", "--which", "row_sum", **extra)
            b = tsr_run(tsr, cache, "--autotune=cached", "--which", "row_sum", "--n", "2048", **extra)
            check(a.ok and b.ok and "no record" in b.stderr and "N=2048" in b.stderr,
                  "another value of the key dim N finds no record (cached takes the first)")
            c = tsr_run(tsr, cache, "--autotune=full", "--which", "row_sum", "--n", "2048", **extra)
            check(c.ok and re.search(r"autotune\.row_sum N=2048 .*timing 2 configurations", c.stderr),
                  "another value of the key dim N is tuned anew under full")
            d = tsr_run(tsr, cache, "--autotune=cached", "--which", "row_sum", **extra)
            check(d.ok and re.search(r"autotune\.row_sum N=4096 .*BLOCK=256 \(recorded", d.stderr),
                  "N=4096's record is still there after N=2048's")

    # corrupt
    if section("corrupt", "corrupt"):
        with tempfile.TemporaryDirectory() as cache:
            r1 = tsr_run(tsr, cache, "--autotune=full", "--which", "row_sum")
            rec = records(cache)
            if rec and broken != "corrupt":
                with open(rec[0], "r+b") as f:
                    data = bytearray(f.read())
                    data[len(data) - 20] ^= 0x40
                    f.seek(0)
                    f.write(data)
            r2 = tsr_run(tsr, cache, "--autotune=cached", "--which", "row_sum")
            check(r1.ok and r2.ok and "is corrupt" in r2.stderr and "no record, the space's first" in r2.stderr and
                  r2.stdout.startswith("row_sum err"),
                  "a damaged record file is removed with a warning; the first configuration runs")
            r3 = tsr_run(tsr, cache, "--autotune=full", "--which", "row_sum")
            rec = records(cache)
            if rec and broken != "corrupt":
                rewrite_payload(rec[0], lambda p: p.replace(b"winner BLOCK=256", b"winner BLOCK=7"))
            r4 = tsr_run(tsr, cache, "--autotune=cached", "--which", "row_sum")
            check(r3.ok and r4.ok and re.search(r"warning: ignoring the autotune record of autotune\.row_sum .*BLOCK=7", r4.stderr) and
                  r4.stdout.startswith("row_sum err"),
                  "a record whose winner is not in the space is ignored with a warning")

    # bundle
    if section("bundle", "bundle"):
        with tempfile.TemporaryDirectory() as work:
            cache = os.path.join(work, "cache")
            r1 = tsr_run(tsr, cache, "--autotune=full", "--which", "row_sum")
            bundle = os.path.join(work, "autotune.bundle")
            extra = {"TSR_NO_CACHE": "1"} if broken == "bundle" else {}
            mk = run([tsrc, PROGRAM, "-o", bundle, "--target", "cpu", "--trace", "--which row_sum"], env=env_for(cache, **extra), timeout=600)
            data = open(bundle, "rb").read() if os.path.exists(bundle) else b""
            m = re.search(rb'"autotune": \[.*?\n \]', data, re.S)
            carried = json.loads(m.group(0)[len(b'"autotune": '):]) if m else []
            check(r1.ok and mk.ok and any(c["kernel"] == "autotune.row_sum" and c["config"] == [["BLOCK", 256]] and c["shape"] == "N=4096"
                                          for c in carried),
                  f"the bundle's manifest carries row_sum's winner BLOCK=256: {carried} {mk.crash or ''}")
            empty = os.path.join(work, "empty")
            os.makedirs(empty)
            r2 = run([tsr, "run", bundle, "--device", "cpu", "--which", "row_sum"], env=env_for(os.path.join(work, "fresh")), timeout=600, cwd=empty)
            check(r2.ok and re.search(r"autotune\.row_sum N=4096 .*BLOCK=256 \(from the bundle\), nothing timed", r2.stderr) and
                  r2.stdout.startswith("row_sum err"),
                  "tsr run BUNDLE with an empty cache takes the bundle's winner without timing")
        if broken is None:
            with tempfile.TemporaryDirectory() as work:
                bundle = os.path.join(work, "tuned.bundle")
                mk = run([tsrc, PROGRAM, "-o", bundle, "--target", "cpu", "--autotune", "full", "--trace", "--which row_sum"],
                         env=env_for(os.path.join(work, "cache")), timeout=600)
                data = open(bundle, "rb").read() if os.path.exists(bundle) else b""
                check(mk.ok and "timing 2 configurations" in mk.stderr and b'"autotune": [' in data and b'"BLOCK",\n     256' in data,
                      "tsrc --autotune full --trace tunes in the trace run and carries the winner")
    return summary(passed, failed, minimum=1)


if __name__ == "__main__":
    sys.exit(main())
