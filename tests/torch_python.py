"""The Python tests' oracle interpreter: the Python that CMake configured may lack torch and numpy
(a pyenv one, say) where another on the machine has them. reexec_with_torch runs the calling
script again under the first of TSR_TORCH_PYTHON, /usr/bin/python3, /usr/local/bin/python3 and
the python3s on PATH that imports both, or skips the test (tests/testlib.py: exit 77, which ctest
shows as skipped; a failure under TSR_REQUIRE_PREREQS=1) when there is none. Imports nothing but
the standard library, so that it works under any Python.

TSR_TEST_HIDE_TORCH=1 is a switch for the tests' negative controls only: it makes every Python
look as if it had no torch, so that a control can show that a missing oracle is never a pass."""
import os
import subprocess
import sys

from testlib import skip


def _has_torch(python):
    if os.environ.get("TSR_TEST_HIDE_TORCH") == "1":
        return False
    try:
        return subprocess.run([python, "-c", "import torch, numpy"], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def reexec_with_torch(name):
    """Returns when this Python has torch and numpy; otherwise execs the script under one that
    has them, or skips the test (testlib.skip)."""
    try:
        if os.environ.get("TSR_TEST_HIDE_TORCH") == "1":
            raise ImportError("hidden by TSR_TEST_HIDE_TORCH")
        import numpy  # noqa: F401
        import torch  # noqa: F401
        return
    except ImportError:
        pass
    tried = [sys.executable]
    if not os.environ.get("TSR_TORCH_REEXEC"):
        candidates = [os.environ.get("TSR_TORCH_PYTHON"), "/usr/bin/python3", "/usr/local/bin/python3"]
        candidates += [os.path.join(d, "python3") for d in os.environ.get("PATH", "").split(os.pathsep) if d]
        seen = {os.path.realpath(sys.executable)}
        for c in candidates:
            if not c or not os.path.exists(c) or os.path.realpath(c) in seen:
                continue
            seen.add(os.path.realpath(c))
            tried.append(c)
            if _has_torch(c):
                os.execve(c, [c, os.path.abspath(sys.argv[0])] + sys.argv[1:], dict(os.environ, TSR_TORCH_REEXEC="1"))
    skip(name, f"no Python interpreter with torch and numpy (tried {', '.join(tried)})")
