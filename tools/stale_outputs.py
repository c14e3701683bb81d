#!/usr/bin/env python3
"""Finds build outputs that ninja considers up to date but that were built from an input that
changed while their command ran, and with --fix deletes them so that the next ninja rebuilds them.

Why: ninja up to 1.11 records an output's mtime as it is after the command (its .ninja_log), so
an input saved while the compiler runs (after the compiler read it, before the object is written)
is older than the output: the next ninja says "no work to do" and links the object compiled from
the old text (ninja issue #1497; fixed in ninja 1.12 by pull request #1943, which logs the
command's start instead). In a working tree where several people edit while others build, this
links objects compiled against different versions of one header. Issue 20's SIGSEGV was one:
exec/GraphReplay.cpp's object was compiled at 15:38:07-15:38:30 while exec/StepBackend.h gained
a virtual (joinCollectives) at 15:38:17, so its call of canCapture() used the old vtable slot,
which in exec/cuda/CudaBackend.cpp's vtable is tuningTarget().

An output is reported when one of its depfile inputs (`ninja -t deps`: the source and every header
the compiler read) has an mtime after the command started (the log's mtime less the command's
duration) and not after the logged mtime (later ones ninja rebuilds by itself). Only outputs with
a depfile are checked (compiles); a link reads objects that ninja itself orders before it. Inputs
that the build itself writes (outputs in .ninja_log, such as the build-id header that every build
regenerates) are not edits: ninja runs their command before the compiles that depend on them, and
the start estimated from millisecond times can fall a moment before their write.

Usage: tools/stale_outputs.py [-C BUILD_DIR] [--fix] [--quiet]
Exit 0: none (or all removed with --fix); 1: some found without --fix; 2: the build directory has
no .ninja_log or ninja failed.
"""
import argparse
import os
import subprocess
import sys
import time


def last_log_entries(build_dir):
    """output path -> (start_ns, logged_mtime_ns), from the last entry of each output in .ninja_log
    (v5: start_ms, end_ms, mtime, path, command hash; start/end relative to that ninja's start)."""
    entries = {}
    with open(os.path.join(build_dir, ".ninja_log")) as f:
        for line in f:
            if line.startswith("#"):
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 5:
                continue
            start_ms, end_ms, mtime = int(parts[0]), int(parts[1]), int(parts[2])
            if mtime <= 0:
                continue  # the command failed or the output was not written
            entries[parts[3]] = (mtime - (end_ms - start_ms) * 1_000_000, mtime)
    return entries


def generated_files(build_dir):
    """Absolute paths of every output in .ninja_log (whatever its logged mtime)."""
    paths = set()
    with open(os.path.join(build_dir, ".ninja_log")) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if line.startswith("#") or len(parts) < 5:
                continue
            p = parts[3]
            paths.add(os.path.normpath(p if os.path.isabs(p) else os.path.join(os.path.abspath(build_dir), p)))
    return paths


def deps_of(build_dir):
    """output path -> its depfile inputs (absolute or relative to build_dir), VALID entries only."""
    out = subprocess.run(["ninja", "-C", build_dir, "-t", "deps"], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("ninja -t deps failed: " + out.stderr.strip())
    deps, current = {}, None
    for line in out.stdout.splitlines():
        if not line.strip():
            current = None
        elif not line.startswith(" "):
            target, _, rest = line.partition(": #deps")
            current = target if "(VALID)" in rest else None
            if current is not None:
                deps[current] = []
        elif current is not None:
            deps[current].append(line.strip())
    return deps


def find_stale(build_dir):
    """[(output, input, start_ns, input_mtime_ns, logged_mtime_ns)], the first raced input of each."""
    log = last_log_entries(build_dir)
    generated = generated_files(build_dir)
    found = []
    for target, inputs in deps_of(build_dir).items():
        if target not in log:
            continue
        start, logged = log[target]
        for inp in inputs:
            path = inp if os.path.isabs(inp) else os.path.join(build_dir, inp)
            if os.path.normpath(os.path.abspath(path)) in generated:
                continue
            try:
                m = os.stat(path).st_mtime_ns
            except OSError:
                continue  # a deleted header: ninja rebuilds the output itself
            if start < m <= logged:
                found.append((target, inp, start, m, logged))
                break
    return found


def clock(ns):
    return time.strftime("%H:%M:%S", time.gmtime(ns / 1e9)) + ".%03d" % (ns // 1_000_000 % 1000)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-C", dest="build_dir", default="build")
    ap.add_argument("--fix", action="store_true", help="delete the outputs found, so that ninja rebuilds them")
    ap.add_argument("--quiet", action="store_true", help="print nothing when none is found")
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(args.build_dir, ".ninja_log")):
        print(f"stale_outputs: {args.build_dir} has no .ninja_log", file=sys.stderr)
        return 2
    try:
        found = find_stale(args.build_dir)
    except RuntimeError as e:
        print(f"stale_outputs: {e}", file=sys.stderr)
        return 2
    if not found:
        if not args.quiet:
            print(f"stale_outputs: no output of {args.build_dir} was built from an input that changed while it was built")
        return 0
    for target, inp, start, m, logged in found:
        print(f"stale_outputs: {target} (built {clock(start)}-{clock(logged)} UTC) read {inp} before it changed at {clock(m)}")
        if args.fix:
            try:
                os.remove(os.path.join(args.build_dir, target))
            except FileNotFoundError:
                pass
    if args.fix:
        print(f"stale_outputs: removed {len(found)}; the next ninja rebuilds them and relinks what links them")
        return 0
    print(f"stale_outputs: {len(found)} stale: run tools/stale_outputs.py -C {args.build_dir} --fix, then ninja")
    return 1


if __name__ == "__main__":
    sys.exit(main())
