#!/usr/bin/env python3
"""Graph IR round trip: for every program that lowers, `tsrc --emit=graph` prints graphs that
`tsrc --read-graph` parses, verifies and prints back identically. Ends with `N passed, N failed`."""
import os
import subprocess
import sys
import tempfile


def main():
    tsrc = sys.argv[1]
    files = []
    for root in sys.argv[2:]:
        for d, _, names in os.walk(root):
            files += [os.path.join(d, n) for n in sorted(names) if n.endswith(".tsr") and not n.startswith("_")]
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for f in sorted(files):
            p = subprocess.run([tsrc, os.path.basename(f), "--emit=graph"], cwd=os.path.dirname(f), capture_output=True, text=True, timeout=60)
            if p.returncode != 0 or not p.stdout.strip():
                continue  # programs with errors, or without graph functions, are other tests' business
            path = os.path.join(tmp, "g.graph")
            with open(path, "w") as out:
                out.write(p.stdout)
            q = subprocess.run([tsrc, path, "--read-graph"], capture_output=True, text=True, timeout=60)
            if q.returncode == 0 and q.stdout == p.stdout:
                passed += 1
            else:
                failed += 1
                print(f"FAIL {f}: " + (q.stderr.strip() or "printed differently after parsing"))
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
