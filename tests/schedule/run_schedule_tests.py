#!/usr/bin/env python3
"""Compiled CPU execution against the reference evaluator.

    run_schedule_tests.py TSRC SCHEDULE_CHECK REPO_ROOT [--goldens DIR] [--min-graphs N]

Lowers every program of tests/ir/programs/ with `tsrc FILE --emit=graph` and runs
`schedule_check` (tests/schedule/schedule_check.cpp) on those graphs and on the graphs written
for this test (tests/schedule/*.graph: views, odd and unit sizes, every storage dtype).
schedule_check itself fails a graph whose kernel steps fell back to the evaluator or launched
nothing; this script requires at least --min-graphs graphs to pass, and the graphs on which the
reference runs at no size (`note` lines) to be exactly those of no_size_runs.txt.

Then compares `tsrc --emit=schedule` of tests/schedule/*.tsr with the .schedule golden files next
to them (or in --goldens DIR). Goldens are rewritten only by tools/update-goldens.sh, never by a
test run. A second run of a few graphs uses a JIT threshold, so that small steps run interpreted
next to compiled ones (both must happen). Exits non-zero on any failure; a crash of either tool
is a failure.
"""
import argparse
import glob
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import Expectations, run  # noqa: E402


def check_run(r, what):
    """Prints the tool's output; returns the number of failures (a crash counts)."""
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    if r.crash:
        print(f"FAIL {what}: {r.crash}")
        return 1
    return 0 if r.ok else 1


def passed_count(stdout):
    m = re.search(r"^(\d+) passed, (\d+) failed$", stdout, re.M)
    return int(m.group(1)) if m else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsrc")
    ap.add_argument("check")
    ap.add_argument("root")
    ap.add_argument("--goldens", help="folder of the .schedule goldens (default: tests/schedule)")
    ap.add_argument("--min-graphs", type=int, default=1)
    ap.add_argument("--goldens-only", action="store_true", help="compare the goldens only (the negative control)")
    ap.add_argument("--device", default="", help="run the compiled side on this GPU (tools/gpu/suite.sh)")
    ap.add_argument("--programs", default="", help="only these programs of tests/ir/programs and graphs of "
                    "tests/schedule (comma-separated names), and no goldens: a shorter run under another lowering (TSR_REGISTER_TILES=all)")
    a = ap.parse_args()
    tsrc, check, root = a.tsrc, a.check, a.root
    here = os.path.join(root, "tests", "schedule")
    goldens = a.goldens or here
    failed = 0
    graphs_passed = 0
    with tempfile.TemporaryDirectory() as tmp:
        if not a.goldens_only:
            graphs = []
            only = set(filter(None, a.programs.split(",")))
            for src in sorted(glob.glob(os.path.join(root, "tests", "ir", "programs", "*.tsr"))):
                if only and os.path.basename(src)[:-4] not in only:
                    continue
                out = os.path.join(tmp, os.path.basename(src)[:-4] + ".graph")
                r = run([tsrc, src, "--emit=graph"], cwd=root)
                if not r.ok or not r.stdout.strip():
                    print(f"FAIL tsrc --emit=graph {src}: {r.crash or r.stderr.strip()}")
                    failed += 1
                    continue
                with open(out, "w") as f:
                    f.write(r.stdout)
                graphs.append(out)
            graphs += [g for g in sorted(glob.glob(os.path.join(here, "*.graph")))
                       if not only or os.path.basename(g)[:-6] in only]
            dev = ["--device", a.device] if a.device else []
            r = run([check] + dev + graphs, cwd=root, timeout=1200)
            failed += check_run(r, "schedule_check")
            graphs_passed = passed_count(r.stdout)
            if graphs_passed < a.min_graphs:
                print(f"FAIL schedule_check: {graphs_passed} graphs passed; at least {a.min_graphs} must")
                failed += 1
            # Graphs the reference runs at no size: expected ones only (no_size_runs.txt).
            if not only:
                exp = Expectations(os.path.join(here, "no_size_runs.txt"), "the reference runs at no size")
                noted = set()
                for m in re.finditer(r"^note (\S+) @(\S+): (.*)$", r.stdout, re.M):
                    name = f"{os.path.basename(m.group(1))} @{m.group(2)}"
                    noted.add(name)
                    exp.check(name, m.group(3))
                failed += exp.finish(noted)
            # Interpreted and compiled steps mixed in one graph (tsr run's JIT threshold): steps of
            # fewer than 2000 element-ops stay interpreted.
            mixed = [g for g in graphs if os.path.basename(g) in ("nn_functions.graph", "views.graph", "layout.graph")]
            # (not on a GPU, which compiles every step)
            if not a.device and not only:
                r = run([check, "--mixed", "--jit-threshold", "2000"] + mixed, cwd=root, timeout=1200)
                r.stdout = r.stdout.replace("\nok", "\nok (mixed)")
                failed += check_run(r, "schedule_check --mixed")

    for src in [] if a.programs else sorted(glob.glob(os.path.join(here, "*.tsr"))):
        golden = os.path.join(goldens, os.path.basename(src)[:-4] + ".schedule")
        r = run([tsrc, os.path.relpath(src, root), "--emit=schedule"], cwd=root)
        if not r.ok:
            print(f"FAIL tsrc --emit=schedule {src}: {r.crash or r.stderr.strip()}")
            failed += 1
            continue
        want = open(golden).read() if os.path.exists(golden) else None
        if r.stdout != want:
            print(f"FAIL {golden} differs from tsrc --emit=schedule (tools/update-goldens.sh rewrites it):\n{r.stdout}")
            failed += 1
        else:
            print(f"ok   {os.path.relpath(golden, root)}")
    print(f"compiled_vs_reference: {graphs_passed} graphs passed;", "FAILED" if failed else "passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
