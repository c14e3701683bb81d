#!/usr/bin/env python3
"""The Tile IR text round trip: for every .tsr file under the given folders whose kernels lower
(`tsrc FILE --emit=tile` succeeds and prints at least one function), reading the printed text back
(`tsrc --read-tile`, which also verifies it) must print it identically. Files whose launches cannot
be lowered before the program runs (sizes known only at run time) are listed as skipped; the test
fails if fewer than `min_functions` functions were checked in all, so that it cannot pass vacuously.

usage: tile_roundtrip.py TSRC MIN_FUNCTIONS DIR_OR_FILE...
"""
import os
import subprocess
import sys
import tempfile


def files(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for d, _, names in os.walk(p):
            for n in sorted(names):
                if n.endswith(".tsr"):
                    yield os.path.join(d, n)


def main():
    tsrc, min_functions, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    checked = failed = 0
    skipped = []
    for path in files(paths):
        p = subprocess.run([tsrc, path, "--emit=tile"], capture_output=True, text=True, timeout=120)
        if p.returncode != 0 or not p.stdout.strip():
            skipped.append(os.path.basename(path))
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".tile", delete=False) as t:
            t.write(p.stdout)
        try:
            q = subprocess.run([tsrc, t.name, "--read-tile"], capture_output=True, text=True, timeout=60)
        finally:
            os.unlink(t.name)
        n = p.stdout.count("\ntile @") + p.stdout.startswith("tile @")
        if q.returncode != 0 or q.stdout != p.stdout:
            failed += 1
            print(f"FAIL {path}: read back {'differs' if q.returncode == 0 else 'failed: ' + q.stderr.strip()}")
            continue
        checked += n
        print(f"ok   {path}: {n} function(s)")
    print(f"skipped (no kernel lowered before run time): {', '.join(skipped) if skipped else 'none'}")
    print(f"{checked} functions round-tripped, {failed} files failed")
    if checked < min_functions:
        print(f"FAIL: expected at least {min_functions} functions")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
