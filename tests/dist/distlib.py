"""What tests/dist's scripts share: checks printed as `PASS WHAT` / `FAIL WHAT` and counted (a
passing check prints its first line only: the rest is the detail a failure shows), and the
environment of a `tsr run --devices N` launch started from a test (no rank variables inherited
from an outer launcher, collectives that time out in 60 s)."""
import os
import sys

RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def __call__(self, ok, what):
        if ok:
            self.passed += 1
            print(f"PASS {what.splitlines()[0] if what else what}")
        else:
            self.failed += 1
            print(f"FAIL {what}")
        sys.stdout.flush()


def launch_env(drop=(), **extra):
    """os.environ without the rank variables (and `drop`), with TSR_DIST_TIMEOUT_S=60 and `extra`."""
    e = dict(os.environ)
    for k in (*RANK_VARIABLES, *drop):
        e.pop(k, None)
    e["TSR_DIST_TIMEOUT_S"] = "60"
    e.update(extra)
    return e
