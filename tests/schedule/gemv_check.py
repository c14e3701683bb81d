#!/usr/bin/env python3
"""GEMV programs (ir/schedule/LowerGemv.h) against the reference evaluator, on the CPU.

    gemv_check.py SCHEDULE_CHECK REPO_ROOT [--device cuda]

Runs schedule_check (tests/schedule/schedule_check.cpp) on tests/schedule/gemv.graph (products
of at most 8 rows are GEMV programs unless TSR_GEMV=0) at sizes of a few rows (M = 1, 2, 3, 5, 7,
8) with ragged N and K (0, 1, 5, 7, 17, 33, 67, 100, 129, 1000) and GPT's decode shapes (384 x 384,
1536 x 384, 384 x 1536), f32, bf16, f16 and f64, batched and broadcast batches, vector operands,
B as w.T (k-major) and as stored (n-major), A reversed (a negative stride). Twice: with the CPU's
tiles, and through the register-tile lowering that the GPU takes, with tiles of the GPU's shape
(TSR_REGISTER_TILES=all, TSR_GEMV_TILES=4x128: one CPU thread holds the tiles).

Passes when every graph agrees with the evaluator at every size (schedule_check's tolerances) and
the GEMV programs ran: the programs compiled (TSR_DUMP_TILE=1) include at least MIN_GEMV matmul
programs with no `dot` and a `reduce_sum`, of both layouts (a `%bt` parameter: k-major; `%b`:
n-major). Negative controls (tests/CMakeLists.txt): with TSR_GEMV=0 the count check fails; with
TSR_GEMV_TEST_BREAK=1 (the loop skips K's first chunk) the comparison fails.
--device cuda runs the same on a GPU (the GPU's own tiles; the register pass is the default there).
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import run  # noqa: E402

SIZES = ";".join([
    "M=1,N=384,K=384,B=1", "M=1,N=1536,K=384,B=1", "M=1,N=384,K=1536,B=1",
    "M=2,N=33,K=1000,B=3", "M=3,N=100,K=129,B=2", "M=5,N=7,K=1,B=1", "M=8,N=1,K=67,B=2",
    "M=7,N=17,K=5,B=3", "M=1,N=5,K=17,B=1", "M=3,N=5,K=0,B=2",
])
MIN_GEMV = 12


def gemv_programs(stderr):
    """The distinct GEMV programs in a TSR_DUMP_TILE=1 dump: (k-major, n-major) counts."""
    texts = set()
    for m in re.finditer(r"^tile @matmul\(.*?^\}$", stderr, re.M | re.S):
        t = m.group(0)
        if re.search(r"= dot ", t) is None and "reduce_sum" in t:
            texts.add(t)
    kmajor = sum(1 for t in texts if "%bt:" in t.split("\n", 1)[0])
    return kmajor, len(texts) - kmajor


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check")
    ap.add_argument("root")
    ap.add_argument("--device", default="")
    a = ap.parse_args()
    graph = os.path.join(a.root, "tests", "schedule", "gemv.graph")
    passes = [("default tiles", {})]
    if not a.device:
        passes.append(("register tiles", {"TSR_REGISTER_TILES": "all", "TSR_GEMV_TILES": "4x128"}))
    failed = 0  # passes with a failure
    for what, extra in passes:
        bad = False
        env = dict(os.environ)
        env["TSR_DUMP_TILE"] = "1"
        env.update(extra)
        dev = ["--device", a.device] if a.device else []
        r = run([a.check] + dev + [graph, "--sizes", SIZES], env=env, timeout=1200)
        sys.stdout.write(r.stdout)
        if r.crash:
            print(f"FAIL {what}: schedule_check {r.crash}")
            failed += 1
            continue
        m = re.search(r"^(\d+) passed, (\d+) failed$", r.stdout, re.M)
        if not r.ok or not m or m.group(2) != "0" or int(m.group(1)) < 5:
            print(f"FAIL {what}: schedule_check against the evaluator (exit {r.returncode})")
            bad = True
        kmajor, nmajor = gemv_programs(r.stderr)
        print(f"{what}: {kmajor} k-major and {nmajor} n-major GEMV programs compiled")
        if kmajor + nmajor < MIN_GEMV or kmajor == 0 or nmajor == 0:
            print(f"FAIL {what}: at least {MIN_GEMV} GEMV programs of both layouts must run")
            bad = True
        failed += bad
    print(f"{len(passes) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
