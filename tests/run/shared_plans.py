#!/usr/bin/env python3
"""One expression of host code at two call sites is planned and compiled once (ctest shared_plans).

    shared_plans.py TSR [--negative]

`value_and_grad(loss_fn)(w, x)` written twice in `main` lowers to two graphs that differ only in
name (eager graphs are cached per call site). The compiled executor keys plans and programs by
the graph's structure (ir::structureHash), so the second site's first call must compile nothing:
the trace of `tsr run --profile` (every step compiled: TSR_JIT_THRESHOLD=0; no disk cache) has
no `compile` span inside that call, and the two sites print the same loss.

--negative: the second site's expression differs (a scaled loss), so its programs are new and
the check must FAIL (tests/CMakeLists.txt, negative_shared_plans).
"""
import json
import os
import subprocess
import sys
import tempfile

NEGATIVE = "--negative" in sys.argv
FIRST = "value_and_grad(loss_fn)(w, x)"
SECOND = "value_and_grad(loss_scaled)(w, x)" if NEGATIVE else "value_and_grad(loss_fn)(w, x)"
PROGRAM = f"""
def loss_fn(w, x):
    return mean(tanh(x @ w))

def loss_scaled(w, x):
    return mean(tanh(x @ w)) * 2.0

def main():
    w = ones((64, 48), f32) * 0.01
    x = ones((32, 64), f32)
    l1, g1 = {FIRST}
    print(item(l1))
    l2, g2 = {SECOND}
    print(item(l2))
"""


def main():
    tsr = sys.argv[1]
    failures = []

    def expect(cond, what):
        print(("ok: " if cond else "FAIL: ") + what)
        if not cond:
            failures.append(what)

    env = dict(os.environ, TSR_NO_CACHE="1", TSR_JIT_THRESHOLD="0")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "two_sites.tsr")
        with open(src, "w") as f:
            f.write(PROGRAM)
        trace = os.path.join(tmp, "trace.json")
        r = subprocess.run([tsr, "run", src, "--device", "cpu", "--profile", trace], env=env, capture_output=True,
                           text=True, timeout=300)
        expect(r.returncode == 0, f"the program runs (rc {r.returncode}: {r.stderr.strip()[-300:]})")
        if r.returncode != 0:
            return 1
        lines = r.stdout.split()
        expect(len(lines) == 2 and lines[0] == lines[1], f"both sites print the same loss: {lines}")
        with open(trace) as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
        # the graph calls of the two value_and_grad lines
        first, second = (PROGRAM.split("\n").index(p) + 1 for p in (f"    l1, g1 = {FIRST}", f"    l2, g2 = {SECOND}"))
        calls = {}
        for e in events:
            at = e.get("args", {}).get("at", "")
            if e["cat"] == "graph" and ":" in at:
                line = int(at.split(":")[1])
                if line in (first, second):
                    calls.setdefault(line, e)
        expect(sorted(calls) == [first, second], f"the trace has a graph call at each site (lines {sorted(calls)})")
        if len(calls) != 2:
            return 1

        def compiles(call):
            t0, t1 = call["ts"], call["ts"] + call["dur"]
            return [e["name"] for e in events if e["cat"] == "compile" and t0 <= e["ts"] <= t1]

        expect(len(compiles(calls[first])) > 0, f"the first site compiles its programs ({len(compiles(calls[first]))} spans)")
        again = compiles(calls[second])
        expect(not again, f"the second site compiles nothing ({len(again)} compile spans: {again[:3]})")
    print(f"{'FAILED' if failures else 'passed'}: {len(failures)} of the checks failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
