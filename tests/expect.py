#!/usr/bin/env python3
"""Runs a command and checks how it ends: its exit code and text in its output. The negative
controls use it to show that a check fails when the thing it checks is broken (a forced
fallback, a hidden oracle, a crashing compiler, a wrong golden), and single-command tests use
it to check a documented exit code as well as a message.

    expect.py [--exit N] [--has REGEX]... [--env NAME=VALUE]... [--label TEXT] -- COMMAND...

--exit N: the exit code the command must return (default 1: a test failing as a test fails). A
crash (a signal, exit 70, a sanitizer report, a hang) never matches, whatever N is. Each --has
must match the command's standard output or error (Python regular expressions, multi-line).
Prints the command's last output lines and `1 passed, 0 failed` or `0 passed, 1 failed`.
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import run  # noqa: E402


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        print("usage: expect.py [--exit N] [--has REGEX]... [--env NAME=VALUE]... -- COMMAND...", file=sys.stderr)
        return 2
    cut = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("--exit", type=int, default=1)
    ap.add_argument("--has", action="append", default=[])
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--label", default="")
    a = ap.parse_args(argv[:cut])
    cmd = argv[cut + 1:]
    env = dict(os.environ)
    for kv in a.env:
        k, _, v = kv.partition("=")
        env[k] = v
    r = run(cmd, env=env, timeout=1800)
    out = r.stdout + r.stderr
    tail = "\n".join(out.rstrip().splitlines()[-15:])
    label = a.label or " ".join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd[:3]))
    problems = []
    if r.crash:
        problems.append(r.crash)
    elif r.returncode != a.exit:
        problems.append(f"exit code {r.returncode}, expected {a.exit}")
    for h in a.has:
        if not re.search(h, out, re.M):
            problems.append(f"the output lacks /{h}/")
    print(f"--- {label}: last lines of its output\n{tail}\n---")
    if problems:
        print(f"FAIL {label}: " + "; ".join(problems))
        print("0 passed, 1 failed")
        return 1
    print(f"ok   {label}: exit {r.returncode}" + "".join(f", has /{h}/" for h in a.has))
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
