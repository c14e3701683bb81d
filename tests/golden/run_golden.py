#!/usr/bin/env python3
"""Golden tests: run `tsrc` on each .tsr file and compare with the expectations written inside it.

A test file holds ordinary Tessera code and comment lines that say what must come out:

    # expect: 3:12: error[E0302]: matmul inner dimensions differ: "D" vs "H"
    # expect: other.tsr:1:1: error[...]: ...      (another file; [...] accepts any code)
    # expect: nn.tsr:*:9: error[E0315]: ...       (any line of another file: the stdlib's move)
    # expect: error[E0018]: ...                   (a diagnostic without a location)
    # args: --emit=types                          (instead of the default --check)
    # exit: 1                                     (default: 1 if any error is expected, else 0)
    # stdout:                                     (then `# | line` lines: stdout, exactly)
    # stderr:                                     (then `# | line` lines: stderr, exactly)

Every reported error and warning must be expected, and every expectation must be reported.
A message ending in `...` matches any message that starts with the text before it.
Prints one line per failing test and ends with `N passed, N failed`.
"""
import os
import re
import subprocess
import sys

DIAG = re.compile(r"^(?:(?P<file>[^\s:][^:]*):(?P<line>\d+):(?P<col>\d+): )?(?P<sev>error|warning|internal error)\[(?P<code>[A-Z0-9]+)\]: (?P<msg>.*)$")
EXPECT = re.compile(r"^#\s*expect:\s*(?:(?:(?P<file>[^\s:]+\.tsr):)?(?P<line>\d+|\*):(?P<col>\d+):)?\s*(?P<sev>error|warning)\[(?P<code>[^\]]+)\]:\s*(?P<msg>.*?)\s*$")


def parse_test(path):
    exp, args, exit_code, blocks = [], None, None, {}
    current = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for raw in f:
            line = raw.rstrip("\n")
            m = EXPECT.match(line)
            if m:
                exp.append(m.groupdict())
                current = None
                continue
            if line.startswith("# args:"):
                args = line[len("# args:"):].split()
            elif line.startswith("# exit:"):
                exit_code = int(line[len("# exit:"):].strip())
            elif line.strip() in ("# stdout:", "# stderr:"):
                current = line.strip()[2:-1]
                blocks[current] = []
            elif current and (line.startswith("# |") or line == "#|"):
                blocks[current].append(line[4:] if line.startswith("# | ") else line[3:])
            else:
                current = None
    return exp, args, exit_code, blocks


def matches(e, d, test_path):
    if e["line"] is None or d["line"] is None:
        # A diagnostic without a location matches an expectation without one.
        if e["line"] is not None or d["line"] is not None:
            return False
    else:
        want_file = e["file"] or os.path.basename(test_path)
        if os.path.basename(d["file"]) != want_file:
            return False
        # `*` accepts any line of another file (in the test's own file it matches nothing).
        if e["line"] == "*":
            if not e["file"]:
                return False
        elif int(e["line"]) != int(d["line"]):
            return False
        if int(e["col"]) != int(d["col"]):
            return False
    if e["sev"] != d["sev"]:
        return False
    if e["code"] not in ("...", d["code"]):
        return False
    msg = e["msg"]
    if msg.endswith("...") and not msg.endswith('"...'):
        return d["msg"].startswith(msg[:-3].rstrip())
    return d["msg"] == msg


def run_one(tsrc, path):
    exp, args, exit_code, blocks = parse_test(path)
    cmd = [tsrc, os.path.basename(path)] + (args if args is not None else ["--check"])
    try:
        p = subprocess.run(cmd, cwd=os.path.dirname(path) or ".", capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return ["timed out after 60 s"]
    diags = [m.groupdict() for m in (DIAG.match(l) for l in p.stderr.splitlines()) if m]
    problems = []
    unmatched = list(diags)
    for e in exp:
        hit = next((d for d in unmatched if matches(e, d, path)), None)
        if hit is None:
            loc = ((e["file"] + ":" if e["file"] else "") + f'{e["line"]}:{e["col"]}: ') if e["line"] else ""
            problems.append(f'missing: {loc}{e["sev"]}[{e["code"]}]: {e["msg"]}')
        else:
            unmatched.remove(hit)
    for d in unmatched:
        loc = f'{os.path.basename(d["file"])}:{d["line"]}:{d["col"]}: ' if d["line"] else ""
        problems.append(f'unexpected: {loc}{d["sev"]}[{d["code"]}]: {d["msg"]}')
    want_exit = exit_code if exit_code is not None else (1 if any(e["sev"] == "error" for e in exp) else 0)
    if p.returncode != want_exit:
        problems.append(f"exit code {p.returncode}, expected {want_exit}")
    for name, lines in blocks.items():
        got = (p.stdout if name == "stdout" else p.stderr).rstrip("\n").split("\n")
        if got != lines:
            import difflib
            diff = "\n".join(difflib.unified_diff(lines, got, "expected " + name, "actual " + name, lineterm=""))
            problems.append(f"{name} differs:\n{diff}")
    if problems and p.stderr and not any(l.startswith("stderr differs") for l in problems):
        problems.append("stderr was:\n" + "\n".join("    " + l for l in p.stderr.splitlines()[:40]))
    return problems


def main():
    if len(sys.argv) < 3:
        print("usage: run_golden.py TSRC DIR_OR_FILE...", file=sys.stderr)
        return 2
    tsrc = os.path.abspath(sys.argv[1])
    files = []
    for root in sys.argv[2:]:
        if os.path.isfile(root):
            files.append(root)
            continue
        for d, _, names in os.walk(root):
            files += [os.path.join(d, n) for n in names if n.endswith(".tsr") and not n.startswith("_")]
    files.sort()
    passed = failed = 0
    for f in files:
        problems = run_one(tsrc, f)
        if problems:
            failed += 1
            print(f"FAIL {f}")
            for pr in problems:
                print("    " + pr.replace("\n", "\n    "))
        else:
            passed += 1
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
