#!/usr/bin/env python3
"""End-to-end programs: `tsr run FILE.tsr [ARGS]` for each file here, compared with what the file
says inside:

    # args: --steps 3            (flags for main; {root} is the repository's root)
    # env: NAME=VALUE            (an environment variable for the run)
    # exit: 1                    (default 0)
    # stdout:                    then `# | line` lines: standard output, exactly
    # stderr-has: text           standard error contains this text
    # stderr-lacks: text         standard error does not contain this text

Each program runs in a fresh temporary folder (its working directory: files it writes with
relative paths land there, so two checkouts never collide). A crash (a signal, exit 70, a
sanitizer report) is a failure whatever the expected exit. Ends with `N passed, N failed`."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import run, summary  # noqa: E402


def parse(path):
    args, code, out, has, lacks, block = [], 0, None, [], [], False
    env = {}
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("# env:"):
            k, _, v = line[6:].strip().partition("=")
            env[k] = v
        elif line.startswith("# args:"):
            args = line[7:].split()
        elif line.startswith("# exit:"):
            code = int(line[7:])
        elif line.startswith("# stderr-has:"):
            has.append(line[13:].strip())
        elif line.startswith("# stderr-lacks:"):
            lacks.append(line[15:].strip())
        elif line.strip() == "# stdout:":
            out, block = [], True
        elif block and line.startswith("# |"):
            out.append(line[4:] if line.startswith("# | ") else line[3:])
        else:
            block = False
    return args, code, out, has, lacks, env


def main():
    tsr = os.path.abspath(sys.argv[1])
    # run_programs.py TSR [--device DEV]: every program on that device (tools/gpu/suite.sh passes
    # cuda), with the same expected output and exit code.
    device = sys.argv[2:4] if sys.argv[2:3] == ["--device"] else []
    here = os.path.dirname(os.path.abspath(__file__))
    passed = failed = 0
    for name in sorted(os.listdir(here)):
        if not name.endswith(".tsr"):
            continue
        args, code, out, has, lacks, env = parse(os.path.join(here, name))
        args = [a.replace("{root}", os.path.dirname(os.path.dirname(here))) for a in args]
        # A program that asks for the reference evaluator (`# env: TSR_EXECUTOR=reference`) tests
        # it, and it runs on the CPU only: such a program keeps to the CPU on every device.
        dev = [] if env.get("TSR_EXECUTOR") == "reference" else device
        with tempfile.TemporaryDirectory() as work:
            p = run([tsr, "run", os.path.join(here, name)] + dev + args, cwd=work, timeout=300,
                    env=dict(os.environ, **env))
        problems = []
        if p.crash:
            problems.append(p.crash)
        elif p.returncode != code:
            problems.append(f"exit code {p.returncode}, expected {code}")
        if out is not None and p.stdout.rstrip("\n").split("\n") != out:
            problems.append("stdout:\n" + p.stdout)
        for h in has:
            if h not in p.stderr:
                problems.append(f"stderr lacks `{h}`")
        for h in lacks:
            if h in p.stderr:
                problems.append(f"stderr has `{h}`")
        if problems:
            failed += 1
            print(f"FAIL {name}: " + "; ".join(problems))
            print("    stderr: " + p.stderr.strip().replace("\n", "\n    "))
        else:
            passed += 1
    return summary(passed, failed, minimum=1, what="programs")


if __name__ == "__main__":
    sys.exit(main())
