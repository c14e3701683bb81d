#!/usr/bin/env python3
"""A program with scans run from its bundle alone by the runner without a compiler:

    bundle_scan.py TSRC TSR_RUN_BUNDLE ROOT

Makes a traced bundle of tests/run/scan_host.tsr (`tsrc -o B --trace ""`): the bundle must
carry the programs of the scans' bodies (ir/Scan.h: graphs of their own, run once per step), or
tsr-run-bundle, which compiles nothing, refuses to run them. Its output must equal the
`# stdout:` block of the program. Under TSR_BUNDLE_TEST_SKIP_SCAN_BODIES=1 the writer leaves the
bodies' programs out and this must FAIL: the negative control (negative_bundle_scan_bodies).
Ends with `N passed, N failed`.
"""
import os
import subprocess
import sys
import tempfile


def main():
    tsrc, runner, root = (os.path.abspath(a) for a in sys.argv[1:4])
    program = os.path.join(root, "tests", "run", "scan_host.tsr")
    want, block = [], False
    for line in open(program, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.strip() == "# stdout:":
            block = True
        elif block and line.startswith("# | "):
            want.append(line[4:])
    with tempfile.TemporaryDirectory() as tmp:
        bundle = os.path.join(tmp, "scan.bundle")
        make = [tsrc, program, "-o", bundle, "--trace", ""]
        p = subprocess.run(make, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            print(f"FAIL scan bundle: tsrc exit {p.returncode}: {p.stderr.strip()[-800:]}\n0 passed, 1 failed")
            return 1
        r = subprocess.run([runner, bundle], capture_output=True, text=True, timeout=600, cwd=tmp)
        got = r.stdout.splitlines()
        if r.returncode == 0 and got == want:
            print(f"ok   scan bundle: {len(got)} lines as the program's expected output\n1 passed, 0 failed")
            return 0
        print(f"FAIL scan bundle: exit {r.returncode}; stdout {got}; stderr {r.stderr.strip()[-600:]}\n0 passed, 1 failed")
        return 1


if __name__ == "__main__":
    sys.exit(main())
