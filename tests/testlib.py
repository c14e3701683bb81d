"""What every Python test of Tessera shares, so that each can fail for the reason it exists.

- `skip(name, why)`: a missing prerequisite. Prints one `SKIP name: why` line and exits 77, which
  tests/CMakeLists.txt declares as the test's SKIP_RETURN_CODE, so ctest shows it as skipped (and
  tools/test.sh counts it). With TSR_REQUIRE_PREREQS=1 (set by .ci/run, where tools/setup.sh has
  installed every prerequisite) a skip is a failure instead: exit 1.
- `run(cmd, ...)`: subprocess.run that classifies the result. `Result.crash` says why a run is a
  crash — killed by a signal, exit 70 (an internal error: support/Diagnostics.h), or a sanitizer
  report — and a crash is a failure everywhere, never "does not lower".
- `Expectations`: files that legitimately fail a step for a stated reason, listed in one file per
  test (`FILE: reason substring` per line, `#` comments). A file leaving or joining the list is a
  failure that says to update the list, so the list cannot go stale silently.
- `summary(name, passed, failed, minimum)`: the closing `N passed, N failed` line; a test that ran
  fewer than `minimum` cases fails, so that none passes vacuously.

Imports nothing but the standard library.
"""
import os
import re
import signal
import subprocess
import sys

SKIP_EXIT = 77
INTERNAL_ERROR_EXIT = 70
_SANITIZER = re.compile(r"ERROR: (Address|Leak|Memory|Thread)Sanitizer|runtime error: |SUMMARY: UndefinedBehaviorSanitizer")


def prerequisites_required():
    return os.environ.get("TSR_REQUIRE_PREREQS") == "1"


def skip(name, why):
    """Exits: 77 (skipped) normally, 1 when TSR_REQUIRE_PREREQS=1."""
    if prerequisites_required():
        print(f"FAIL {name}: {why} (TSR_REQUIRE_PREREQS=1: the prerequisite must be installed here)")
        print("0 passed, 1 failed")
        sys.stdout.flush()
        sys.exit(1)
    print(f"SKIP {name}: {why}")
    sys.stdout.flush()
    sys.exit(SKIP_EXIT)


class Result:
    def __init__(self, cmd, proc=None, timeout=None):
        self.cmd = cmd
        self.returncode = proc.returncode if proc else None
        self.stdout = (proc.stdout if proc else "") or ""
        self.stderr = (proc.stderr if proc else "") or ""
        self.timed_out = timeout is not None
        if timeout is not None:
            self.stdout = _text(timeout.stdout)
            self.stderr = _text(timeout.stderr)

    @property
    def ok(self):
        return self.returncode == 0

    @property
    def crash(self):
        """Why this run is a crash (a string), or None. A hang counts as one."""
        return crash_reason(self.returncode, self.stderr, self.timed_out)


def _text(b):
    if b is None:
        return ""
    return b.decode(errors="replace") if isinstance(b, bytes) else b


def crash_reason(returncode, stderr="", timed_out=False):
    if timed_out:
        return "did not finish (a hang)"
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    if returncode is not None and returncode >= 128 + 1 and returncode <= 128 + 64:
        # A shell between us and the program reports a signal as 128 + N.
        return f"killed by signal {returncode - 128} (exit {returncode})"
    if returncode == INTERNAL_ERROR_EXIT:
        return "an internal error (exit 70)"
    m = _SANITIZER.search(stderr or "")
    if m:
        return f"a sanitizer report ({m.group(0).strip()})"
    return None


def run(cmd, timeout=600, **kw):
    """subprocess.run(cmd, capture_output, text) that never raises on a timeout: the Result says
    `timed_out` and counts as a crash."""
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    try:
        return Result(cmd, subprocess.run(cmd, timeout=timeout, **kw))
    except subprocess.TimeoutExpired as e:
        return Result(cmd, None, e)


def first_error(stderr):
    for line in (stderr or "").splitlines():
        if "error" in line:
            return line.strip()
    lines = (stderr or "").strip().splitlines()
    return lines[0].strip() if lines else "(no message)"


class Expectations:
    """`path`: lines `NAME: reason substring`. `check(name, message)` is called for each file that
    fails the step, `passed(name)` for each that goes through it; `finish()` reports the listed
    files that were not seen and returns the number of problems found by all three (callers add
    that to their failures once, at the end)."""

    def __init__(self, path, label):
        self.path, self.label = path, label
        self.expected = {}
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    line = line.strip()
                    if not line or line.startswith("#"):
                        continue
                    name, _, reason = line.partition(":")
                    self.expected[name.strip()] = reason.strip()
        self.seen = set()
        self.problems = 0

    def check(self, name, message):
        """True when `name` failing with `message` is expected; else prints why and counts it."""
        self.seen.add(name)
        want = self.expected.get(name)
        if want is None:
            print(f"FAIL {name}: {self.label}: {message}\n     (not listed in {self._rel()}: fix it, or list it there with its reason)")
            self.problems += 1
            return False
        if want not in message:
            print(f"FAIL {name}: {self.label} for another reason than listed in {self._rel()}:\n     got {message!r}\n     listed {want!r}")
            self.problems += 1
            return False
        print(f"expected {name}: {self.label}: {want}")
        return True

    def passed(self, name):
        """`name` went through the step: a failure if it is listed (it left the list)."""
        if name in self.expected:
            print(f"FAIL {name}: listed in {self._rel()} as failing ({self.expected[name]}), but it now passes: remove it from the list")
            self.problems += 1

    def finish(self, names_run):
        for name in self.expected:
            if name not in names_run:
                print(f"FAIL {name}: listed in {self._rel()} but not among the files this test ran")
                self.problems += 1
        return self.problems

    def _rel(self):
        return os.path.relpath(self.path)


class Tally:
    """The pass and fail counts of a test script's checks: `report` prints `ok   NAME` or
    `FAIL NAME: WHY` and counts it; `summary` ends as summary() below."""

    def __init__(self):
        self.passed = self.failed = 0

    def report(self, ok, name, why=""):
        if ok:
            self.passed += 1
            print(f"ok   {name}")
        else:
            self.failed += 1
            print(f"FAIL {name}: {why}")

    def raises(self, name, fn, kind, *parts):
        """Reports whether fn() raises `kind` with every text of `parts` in its message; returns
        the message (None when it raised nothing or something else)."""
        try:
            fn()
        except kind as e:
            text = str(e)
            missing = [p for p in parts if p not in text]
            self.report(not missing, name, f"message lacks {missing}: {text}")
            return text
        except Exception as e:  # noqa: BLE001
            self.report(False, name, f"raised {type(e).__name__}: {e}")
            return None
        self.report(False, name, "did not raise")
        return None

    def summary(self, minimum=1, what="cases"):
        return summary(self.passed, self.failed, minimum=minimum, what=what)


def summary(passed, failed, minimum=1, what="cases"):
    """Prints `N passed, N failed` and returns the exit code: 1 on a failure or fewer than
    `minimum` passed."""
    if passed < minimum:
        print(f"FAIL: {passed} {what} passed; at least {minimum} must run and pass")
        failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


SVG = "{http://www.w3.org/2000/svg}"


def chart_problems(path, series, points, labels=(), what="the curves"):
    """What is wrong with an SVG chart that a training example wrote (tools' write_text of a
    plot): it must be well-formed SVG with one polyline per entry of `series` (names for the
    message), each of `points` points inside the image, and every text of `labels` somewhere in
    its text. Returns the problems as sentences; empty when the chart is right."""
    import xml.etree.ElementTree as ET
    try:
        svg = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        return [f"{what} are not well-formed XML: {e}"]
    problems = []
    if svg.tag != SVG + "svg":
        problems.append(f"the root element is {svg.tag}, not svg")
    lines = svg.findall(f".//{SVG}polyline")
    if len(lines) != len(series):
        problems.append(f"expected {len(series)} polylines ({', '.join(series)}), got {len(lines)}")
    width, height = float(svg.get("width", "inf")), float(svg.get("height", "inf"))
    for pl in lines:
        pts = pl.get("points", "").split()
        if len(pts) != points:
            problems.append(f"a polyline has {len(pts)} points, not {points}")
        for pt in pts:
            x, y = (float(v) for v in pt.split(","))
            if not (0 <= x <= width and 0 <= y <= height):
                problems.append(f"point {pt} lies outside the image")
                break
    texts = " ".join(t.text or "" for t in svg.iter(SVG + "text"))
    for label in labels:
        if label not in texts:
            problems.append(f"the chart has no `{label}` label")
    return problems
