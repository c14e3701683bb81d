"""Re-runs the calling script under a Python that has torch and numpy (TSR_TORCH_PYTHON,
/usr/bin/python3, /usr/local/bin/python3, the python3s on PATH), or prints SKIP and passes when
there is none. Imports nothing but the standard library, so that it works under any Python."""
import os
import subprocess
import sys


def _has_torch(python):
    try:
        return subprocess.run([python, "-c", "import torch, numpy"], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def reexec_with_torch(name):
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
        return
    except ImportError:
        pass
    if not os.environ.get("TSR_AD_REEXEC"):
        candidates = [os.environ.get("TSR_TORCH_PYTHON"), "/usr/bin/python3", "/usr/local/bin/python3"]
        candidates += [os.path.join(d, "python3") for d in os.environ.get("PATH", "").split(os.pathsep) if d]
        seen = {os.path.realpath(sys.executable)}
        for c in candidates:
            if not c or not os.path.exists(c) or os.path.realpath(c) in seen:
                continue
            seen.add(os.path.realpath(c))
            if _has_torch(c):
                os.execve(c, [c, os.path.abspath(sys.argv[0])] + sys.argv[1:], dict(os.environ, TSR_AD_REEXEC="1"))
    print(f"SKIP {name}: no Python interpreter with torch and numpy")
    print("0 passed, 0 failed")
    sys.exit(0)
