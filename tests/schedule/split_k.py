#!/usr/bin/env python3
"""Split-K matrix products (ir/schedule/LowerSplitK.cpp) on the compiled CPU path against the
reference evaluator.

    split_k.py SCHEDULE_CHECK REPO_ROOT [--device cuda]

A GPU splits only tensor-core products of few tiles; TSR_MATMUL_SPLIT_K=P splits every float
product into P parts, which is how this test runs the two programs (the parts' partial products
into an f32 workspace, then their sum rounded into the result) on the CPU's code generator:
schedule_check runs tests/schedule/split_k.graph (a weight gradient through a transposed view, a
plain product, a batched bf16 product with an epilogue) at sizes where K spans several chunks,
the last one shorter, and compares with the evaluator. The programs that ran are printed by
TSR_DUMP_TILE=1: both split programs must appear, else the split did not happen and the check
proves nothing ("no split-K programs ran"). The environment's TSR_MATMUL_SPLIT_K, when set, is
kept (the negative control sets 0).
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import run  # noqa: E402

# K of 300 and 1000 in chunks of whole k tiles (the CPU's BK is 128 from K = 128): 3 parts of
# 128, 128, 44 and of 384, 384, 232; M and N ragged against the tiles.
SIZES = "M=70,N=45,K=300,B=2;M=16,N=130,K=1000,B=1;M=1,N=3,K=257,B=3"


def main():
    check, root = sys.argv[1], sys.argv[2]
    extra = sys.argv[3:]
    env = dict(os.environ)
    env.setdefault("TSR_MATMUL_SPLIT_K", "3")
    env["TSR_DUMP_TILE"] = "1"
    graph = os.path.join(root, "tests", "schedule", "split_k.graph")
    r = run([check, graph, "--sizes", SIZES] + extra, env=env)
    sys.stdout.write(r.stdout)
    failed = 0
    if r.crash:
        print(f"FAIL split_k: schedule_check {r.crash}")
        sys.stderr.write(r.stderr[-4000:])
        return 1
    if not r.ok or not re.search(r"^\d+ passed, 0 failed$", r.stdout, re.M):
        print("FAIL split_k: the compiled split products differ from the evaluator")
        sys.stderr.write(r.stderr[-4000:])
        failed += 1
    parts = len(re.findall(r"@matmul_parts\b", r.stderr))
    sums = len(re.findall(r"@matmul_sum\b", r.stderr))
    if parts == 0 or sums == 0:
        print(f"FAIL split_k: no split-K programs ran ({parts} partial-product and {sums} sum programs compiled)")
        failed += 1
    else:
        print(f"PASS split_k: {parts} partial-product and {sums} sum programs compiled")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
