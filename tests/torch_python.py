"""The Python tests' oracle interpreter: the Python that CMake configured may lack torch and numpy
(a pyenv one, say) where another on the machine has them. reexec_with_torch runs the calling
script again under the first of TSR_TORCH_PYTHON, /usr/bin/python3, /usr/local/bin/python3 and
the python3s on PATH that imports both, or prints a visible SKIP line when there is none. Imports
nothing but the standard library, so that it works under any Python."""
import os
import subprocess
import sys


def _has_torch(python):
    try:
        return subprocess.run([python, "-c", "import torch, numpy"], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def reexec_with_torch(name, skip_exit=0):
    """Returns when this Python has torch and numpy; otherwise execs the script under one that
    has them, or prints `SKIP name: ...` and exits with `skip_exit` (0 after a `0 passed, 0
    failed` line for the tests that count their cases; 77 for ctest's SKIP_RETURN_CODE)."""
    try:
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
    print(f"SKIP {name}: no Python interpreter with torch and numpy (tried {', '.join(tried)})")
    if skip_exit == 0:
        print("0 passed, 0 failed")
    sys.exit(skip_exit)
