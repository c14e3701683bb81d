#!/usr/bin/env python3
"""The Tile IR text round trip: for every .tsr file under the given folders whose kernels lower
(`tsrc FILE --emit=tile` succeeds and prints at least one function), reading the printed text back
(`tsrc --read-tile`, which also verifies it) must print it identically. Files whose launches cannot
be lowered before the program runs (sizes known only at run time) are listed, with the reason, in
not_lowered.txt beside this script; a file leaving or joining that list fails, and so does any
crash of tsrc. The test fails if fewer than `min_functions` functions were checked in all, so that
it cannot pass vacuously.
Malformed texts derived from a small valid function must be rejected with their messages.

usage: tile_roundtrip.py TSRC MIN_FUNCTIONS DIR_OR_FILE...
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import Expectations, first_error, run  # noqa: E402


def files(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for d, _, names in os.walk(p):
            for n in sorted(names):
                if n.endswith(".tsr"):
                    yield os.path.join(d, n)


GOOD = """tile @k(%x: tensor<1, f32>, %a: f32) grid 1 config {B = 4} {
  %2 = program_id {axis = 0} : i64
  %3 = load_box %x, %2 {box = [4]} : tile<4xf32>
  %4 = broadcast %a {shape = [4]} : tile<4xf32>
  %5 = mul %3, %4 : tile<4xf32>
  store_box %x, %2, %5 {box = [4]}
}
"""

# Malformed text: (what is changed, its replacement, part of the message). Each must be an error
# (exit code 1: the parser's with a line and column, the verifier's naming the op), never a crash.
BAD = [
    ("mul %3, %4", "mul %3, %9", "use of undefined value %9"),
    ("mul %3, %4", "mul %3, %a", "tile @k: %5 = mul: operands differ"),
    ("tile<4xf32>\n  %4", "tile<0xf32>\n  %4", "tile sizes must be positive"),
    ("tile<4xf32>\n  %4", "tile<4xq32>\n  %4", "unknown dtype in tile<4xq32>"),
    ("program_id", "program_ident", "unknown op `program_ident`"),
    ("grid 1", "grid 4", "the grid's rank must be 1, 2 or 3"),
    ("{box = [4]} : tile", "{box = [4, 4]} : tile", "tile @k: %3 = load_box: attribute `box` must give one size per tensor axis"),
    ("{axis = 0}", "{axis = 99999999999999999999}", "integer out of range"),
    ("}\n", "", "expected `}`"),
]


def malformed(tsrc):
    failed = 0
    for old, new, want in BAD:
        assert old in GOOD, old
        q = read_back(tsrc, GOOD.replace(old, new, 1))
        if q.returncode != 1 or want not in q.stderr:
            failed += 1
            print(f"FAIL malformed text ({new!r}): exit code {q.returncode}, stderr {q.stderr.strip()!r}, expected {want!r}")
    print(f"{len(BAD) - failed} of {len(BAD)} malformed texts rejected with their message")
    return failed


def read_back(tsrc, text):
    """`tsrc FILE --read-tile` of `text` written to a temporary file: the run (testlib.run's)."""
    with tempfile.NamedTemporaryFile("w", suffix=".tile", delete=False) as t:
        t.write(text)
    try:
        return run([tsrc, t.name, "--read-tile"], timeout=60)
    finally:
        os.unlink(t.name)


def main():
    tsrc, min_functions, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    checked = failed = 0
    exp = Expectations(os.path.join(os.path.dirname(os.path.abspath(__file__)), "not_lowered.txt"),
                       "no kernel lowered before run time")
    names = set()
    for path in files(paths):
        name = os.path.relpath(path, os.path.dirname(os.path.dirname(path)))
        names.add(name)
        p = run([tsrc, path, "--emit=tile"], timeout=120)
        if p.crash:
            failed += 1
            print(f"FAIL {path}: tsrc --emit=tile: {p.crash}\n{p.stderr[-2000:]}")
            continue
        if not p.ok or not p.stdout.strip():
            exp.check(name, first_error(p.stderr) if not p.ok else "no kernel launch lowers")
            continue
        exp.passed(name)
        q = read_back(tsrc, p.stdout)
        n = p.stdout.count("\ntile @") + p.stdout.startswith("tile @")
        if not q.ok or q.stdout != p.stdout:
            failed += 1
            print(f"FAIL {path}: read back {'differs' if q.ok else 'failed: ' + (q.crash or q.stderr.strip())}")
            continue
        checked += n
        print(f"ok   {path}: {n} function(s)")
    # The programs of graphs' kernel steps (row steps among them: tests/schedule/rows.tsr) print
    # and parse back the same way.
    rows = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "schedule", "rows.tsr")
    p = run([tsrc, rows, "--emit=tile", "--graph-kernels"], timeout=120)
    n = p.stdout.count("\ntile @") + p.stdout.startswith("tile @")
    q = read_back(tsrc, p.stdout) if p.ok and n else None
    if q is None or not q.ok or q.stdout != p.stdout or "_row(" not in p.stdout.replace(".row(", "_row("):
        failed += 1
        print(f"FAIL {rows} --graph-kernels: {p.crash or p.stderr.strip()[-500:] or 'no row program, or read back differs'}")
    else:
        checked += n
        print(f"ok   {rows} --graph-kernels: {n} function(s)")
    failed += malformed(tsrc)
    failed += exp.finish(names)
    print(f"{checked} functions round-tripped, {failed} failures")
    if checked < min_functions:
        print(f"FAIL: expected at least {min_functions} functions")
        failed += 1
    print(f"{checked} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
