#!/usr/bin/env python3
"""Every program of examples/ (the spec's examples) run with `tsr run` on the GPU and on the CPU:
both must exit 0, print the same lines, and agree in every number to a relative 2e-2 (or an
absolute 1e-3 for numbers near zero: errors and losses measured in different arithmetic order).
Progress lines (`NAME k/n (p%) t.s`) and times are not compared. Ends with `N passed, N failed`.

usage: compare_examples.py TSR EXAMPLE.tsr...   (tools/gpu/suite.sh)
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
from testlib import run, summary  # noqa: E402

NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
PROGRESS = re.compile(r"\d+/\d+ \(\d+%\)")


def lines(text):
    return [l for l in text.splitlines() if l.strip() and not PROGRESS.search(l)]


def same(a, b):
    """'' when the lines agree (words equal, numbers within tolerance), else the first difference."""
    if len(a) != len(b):
        return f"{len(a)} lines vs {len(b)}"
    for la, lb in zip(a, b):
        if NUMBER.sub("#", la) != NUMBER.sub("#", lb):
            return f"{la!r} vs {lb!r}"
        for x, y in zip(NUMBER.findall(la), NUMBER.findall(lb)):
            x, y = float(x), float(y)
            if abs(x - y) > max(2e-2 * max(abs(x), abs(y)), 1e-3):
                return f"{la!r} vs {lb!r}"
    return ""


def main():
    tsr, files = os.path.abspath(sys.argv[1]), sys.argv[2:]
    passed = failed = 0
    for f in files:
        out = {}
        for dev in ("cuda", "cpu"):
            r = run([tsr, "run", f, "--device", dev], timeout=600)
            out[dev] = r
        bad = [f"{d}: {r.crash or 'exit ' + str(r.returncode)}: {r.stderr.strip()[-500:]}" for d, r in out.items() if not r.ok]
        diff = "" if bad else same(lines(out["cuda"].stdout), lines(out["cpu"].stdout))
        if bad or diff:
            failed += 1
            print(f"FAIL {f}: " + ("; ".join(bad) if bad else diff))
        else:
            passed += 1
            print(f"ok   {f}: " + " | ".join(lines(out["cuda"].stdout)[-1:]))
    return summary(passed, failed, minimum=len(files), what="programs")


if __name__ == "__main__":
    sys.exit(main())
