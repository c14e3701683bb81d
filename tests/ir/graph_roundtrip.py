#!/usr/bin/env python3
"""Graph IR round trip: for every program that lowers, `tsrc --emit=graph` prints graphs that
`tsrc --read-graph` parses, verifies and prints back identically.

Programs that do not lower (exit 1 with a diagnostic: the error tests of tests/golden, files
without graph functions) are listed with their reason in not_lowered.txt beside this script; a
program leaving or joining that list fails the test, and so does any crash of tsrc (a signal,
exit 70, a sanitizer report). Ends with `N passed, N failed`.

usage: graph_roundtrip.py TSRC MIN_PASSED DIR...
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import Expectations, first_error, run, summary  # noqa: E402


def main():
    tsrc, minimum = sys.argv[1], int(sys.argv[2])
    files = []  # (path, name: the path from the root's parent, e.g. examples/gemm.tsr)
    for root in sys.argv[3:]:
        top = os.path.dirname(os.path.abspath(root))
        for d, _, names in os.walk(root):
            files += [(os.path.join(d, n), os.path.relpath(os.path.join(d, n), top)) for n in sorted(names)
                      if n.endswith(".tsr") and not n.startswith("_")]
    here = os.path.dirname(os.path.abspath(__file__))
    exp = Expectations(os.path.join(here, "not_lowered.txt"), "does not lower to Graph IR")
    passed = failed = 0
    names = set()
    with tempfile.TemporaryDirectory() as tmp:
        for f, name in sorted(files):
            names.add(name)
            p = run([tsrc, os.path.basename(f), "--emit=graph"], cwd=os.path.dirname(f), timeout=60)
            if p.crash:
                failed += 1
                print(f"FAIL {f}: tsrc --emit=graph: {p.crash}\n{p.stderr[-2000:]}")
                continue
            if not p.ok or not p.stdout.strip():
                why = first_error(p.stderr) if not p.ok else "no graph functions"
                exp.check(name, why)  # counted by exp.finish
                continue
            exp.passed(name)
            path = os.path.join(tmp, "g.graph")
            with open(path, "w") as out:
                out.write(p.stdout)
            q = run([tsrc, path, "--read-graph"], timeout=60)
            if q.ok and q.stdout == p.stdout:
                passed += 1
            else:
                failed += 1
                print(f"FAIL {f}: " + (q.crash or q.stderr.strip() or "printed differently after parsing"))
    failed += exp.finish(names)
    return summary(passed, failed, minimum=minimum, what="programs")


if __name__ == "__main__":
    sys.exit(main())
