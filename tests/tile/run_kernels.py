#!/usr/bin/env python3
"""Kernels run on the CPU end to end: `tsr run FILE` for each file given, which must exit with 0
(each program checks its kernels against graph-level references with its own asserts, and an
assert that fails exits with 1) and print what it measured. Prints the programs' output and ends
with `N passed, N failed`.

The graph-level references run on the reference evaluator (TSR_EXECUTOR=reference), the numeric
oracle, so that a kernel is compared with exact semantics rather than with other compiled code.

With `--device cuda[:N]` (tools/gpu/suite.sh) the kernels run on that GPU, and so do the graph-level
references (compiled for the GPU, which graph_eval checks against PyTorch there).

usage: run_kernels.py TSR [--device DEV] FILE...
"""
import os
import subprocess
import sys


def main():
    tsr, files = os.path.abspath(sys.argv[1]), sys.argv[2:]
    device = []
    if files[:1] == ["--device"]:
        device, files = files[:2], files[2:]
    passed = failed = 0
    for path in files:
        env = dict(os.environ) if device else dict(os.environ, TSR_EXECUTOR="reference")
        p = subprocess.run([tsr, "run", os.path.basename(path)] + device, cwd=os.path.dirname(os.path.abspath(path)),
                           capture_output=True, text=True, timeout=600, env=env)
        out = p.stdout.strip()
        if p.returncode != 0 or not out:
            failed += 1
            print(f"FAIL {path}: exit code {p.returncode}")
            print("    " + (out + "\n" + p.stderr.strip()).strip().replace("\n", "\n    "))
        else:
            passed += 1
            print(f"ok   {path}")
            print("    " + out.replace("\n", "\n    "))
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
