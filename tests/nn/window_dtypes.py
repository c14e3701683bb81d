#!/usr/bin/env python3
"""Convolution and pooling's window programs in bf16, f16, f32 and the integer dtypes against the
reference evaluator (ctest window_dtypes; the GPU suite's window_dtypes_cuda).

  window_dtypes.py TSR [--device cpu|cuda] [--negative]

Runs tests/nn/window_dtypes.tsr on the compiled executor (on the CPU with TSR_WINDOW_STEPS=1, so
that conv and the pools run as the GPU's window programs) and on the reference evaluator, and
compares each dtype's line: the dtypes equal, the integers exactly, the floats (sums of squares of
outputs and gradients) to a relative 2e-3 for bf16 and f16 (the evaluator sums in f64, the
programs in f32, each rounding once into the narrow dtype), 1e-5 for f32. The compiled run's
profile must show window programs launched and no library step of a window op. --negative gives
the compiled run another weight (--bias 0.05) and shifted integers: every line must differ.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from testlib import summary  # noqa: E402

PROGRAM = os.path.join(HERE, "window_dtypes.tsr")
TOL = {"bf16": 2e-3, "f16": 2e-3, "f32": 1e-5}
WINDOW_OPS = ("conv", "conv_transpose", "max_pool", "max_pool_grad", "avg_pool", "avg_pool_grad")


def run(cmd, env):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if p.returncode != 0:
        print(f"FAIL: {' '.join(cmd)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
        sys.exit(1)
    return [line.split() for line in p.stdout.splitlines() if line.strip()]


def main():
    tsr = os.path.abspath(sys.argv[1])
    device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cpu"
    negative = "--negative" in sys.argv
    env = dict(os.environ, TSR_WINDOW_STEPS="1")
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        ours = run([tsr, "run", PROGRAM, "--device", device, "--profile", trace] + (["--bias", "0.05"] if negative else []),
                   dict(env, TSR_EXECUTOR="compiled"))
        ref = run([tsr, "run", PROGRAM, "--device", "cpu"], dict(env, TSR_EXECUTOR="reference"))
        with open(trace) as f:
            events = json.load(f)["traceEvents"]
    passed = failed = 0
    launches = sum(1 for e in events if e.get("cat") == "launch" and str(e.get("name", "")).startswith("window"))
    library = sum(1 for e in events if e.get("cat") == "step" and len(str(e.get("name", "")).split()) == 4
                  and str(e["name"]).split()[2] == "library" and str(e["name"]).split()[3] in WINDOW_OPS)
    ok = launches > 0 and library == 0
    print(f"{'ok  ' if ok else 'FAIL: window steps'} ({device}): {launches} launches of window programs, {library} library steps of conv or pool ops")
    passed += ok
    failed += not ok
    if len(ours) != len(ref) or len(ref) != 6:
        print(f"FAIL: {len(ours)} lines from the compiled run, {len(ref)} from the evaluator (6 expected)")
        return 1
    differ = 0
    for a, b in zip(ours, ref):
        dt = b[0]
        if a[:2] != b[:2]:
            why = f"dtypes {a[:2]} against {b[:2]}"
        elif dt in TOL:
            errs = [abs(float(x) - float(y)) / max(abs(float(y)), 1e-30) for x, y in zip(a[2:], b[2:])]
            why = "" if max(errs) <= TOL[dt] else f"relative errors {', '.join(f'{e:.1e}' for e in errs)} > {TOL[dt]:.0e}"
            detail = ", ".join(f"{e:.1e}" for e in errs)
        else:
            why = "" if a[2:] == b[2:] else f"{a[2:]} against {b[2:]}"
            detail = "exact"
        good = not why
        differ += not good
        passed += good
        failed += not good
        print(f"{'ok  ' if good else 'FAIL'} {dt} ({device} against the evaluator): {detail if good else why}")
    if negative:
        print(f"negative: {differ} of {len(ref)} dtypes differ")
        return 1 if differ == len(ref) else 0
    return summary(passed, failed, minimum=7)


if __name__ == "__main__":
    sys.exit(main())
