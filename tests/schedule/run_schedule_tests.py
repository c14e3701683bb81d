#!/usr/bin/env python3
"""Compiled CPU execution against the reference evaluator.

    run_schedule_tests.py TSRC SCHEDULE_CHECK REPO_ROOT

Lowers every program of tests/ir/programs/ with `tsrc FILE --emit=graph` and runs
`schedule_check` (tests/schedule/schedule_check.cpp) on those graphs and on the graphs written
for this test (tests/schedule/*.graph: views, odd and unit sizes, every storage dtype). Then
compares `tsrc --emit=schedule` of tests/schedule/*.tsr with the .schedule golden files next to
them (regenerate with TSR_UPDATE_GOLDEN=1). A second run of a few graphs uses a JIT threshold, so that
small steps run interpreted next to compiled ones. Exits non-zero on any failure.
"""
import glob
import os
import subprocess
import sys
import tempfile


def main():
    tsrc, check, root = sys.argv[1:4]
    here = os.path.join(root, "tests", "schedule")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        graphs = []
        for src in sorted(glob.glob(os.path.join(root, "tests", "ir", "programs", "*.tsr"))):
            out = os.path.join(tmp, os.path.basename(src)[:-4] + ".graph")
            r = subprocess.run([tsrc, src, "--emit=graph"], capture_output=True, text=True, cwd=root)
            if r.returncode != 0 or not r.stdout.strip():
                print(f"FAIL tsrc --emit=graph {src}: {r.stderr.strip()}")
                failed += 1
                continue
            with open(out, "w") as f:
                f.write(r.stdout)
            graphs.append(out)
        graphs += sorted(glob.glob(os.path.join(here, "*.graph")))
        r = subprocess.run([check] + graphs, capture_output=True, text=True, cwd=root, timeout=1200)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        if r.returncode != 0:
            failed += 1
        # Interpreted and compiled steps mixed in one graph (tsr run's JIT threshold): steps of
        # fewer than 2000 element-ops stay interpreted.
        mixed = [g for g in graphs if os.path.basename(g) in ("nn_functions.graph", "views.graph", "layout.graph")]
        r = subprocess.run([check, "--jit-threshold", "2000"] + mixed, capture_output=True, text=True, cwd=root, timeout=1200)
        sys.stdout.write(r.stdout.replace("\nok", "\nok (mixed)"))
        sys.stderr.write(r.stderr)
        if r.returncode != 0:
            failed += 1

    for src in sorted(glob.glob(os.path.join(here, "*.tsr"))):
        golden = src[:-4] + ".schedule"
        r = subprocess.run([tsrc, os.path.relpath(src, root), "--emit=schedule"], capture_output=True, text=True, cwd=root)
        if r.returncode != 0:
            print(f"FAIL tsrc --emit=schedule {src}: {r.stderr.strip()}")
            failed += 1
            continue
        if os.environ.get("TSR_UPDATE_GOLDEN") == "1":
            with open(golden, "w") as f:
                f.write(r.stdout)
        want = open(golden).read() if os.path.exists(golden) else None
        if r.stdout != want:
            print(f"FAIL {os.path.relpath(golden, root)} differs from tsrc --emit=schedule:\n{r.stdout}")
            failed += 1
        else:
            print(f"ok   {os.path.relpath(golden, root)}")
    print("compiled_vs_reference:", "FAILED" if failed else "passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
