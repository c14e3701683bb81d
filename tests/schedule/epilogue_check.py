#!/usr/bin/env python3
"""Products with epilogues (ir/schedule/EpilogueFusion.cpp) on the compiled CPU path against the
reference evaluator.

    epilogue_check.py TSRC SCHEDULE_CHECK REPO_ROOT [--device cuda]

Lowers tests/schedule/epilogue.tsr and fusion.tsr to Graph IR (`tsrc --emit=graph`) and runs each
graph with schedule_check under the three rules of TSR_EPILOGUE (the default, which fuses
epilogues without a transcendental function; `all`; `0`) at sizes that take the tiled product
(the epilogue in its program) and a GEMV (the epilogue as its own program). The programs that
ran are printed by TSR_DUMP_TILE=1: under the default and `all` some product must have taken
its epilogue (a parameter `in0` or `mm` after its operands), and under `all` more than under
the default, else the check proves nothing. The negative control, TSR_EPILOGUE_TEST_BREAK=1,
stores the product where the epilogue's result belongs.
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import run  # noqa: E402

SIZES = "B=3,T=37,N=19,I=40,O=24;B=1,T=5,N=4,I=9,O=7"
FUSED = re.compile(r"^tile @matmul\([^)]*%(in0|mm):", re.M)


def main():
    tsrc, check, root = sys.argv[1], sys.argv[2], sys.argv[3]
    extra = sys.argv[4:]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        graphs = []
        for name in ("epilogue", "fusion"):
            r = run([tsrc, os.path.join("tests", "schedule", name + ".tsr"), "--emit=graph"], cwd=root)
            if not r.ok:
                print(f"FAIL tsrc --emit=graph {name}.tsr: {r.crash or r.stderr.strip()}")
                return 1
            path = os.path.join(tmp, name + ".graph")
            with open(path, "w") as f:
                f.write(r.stdout)
            graphs.append(path)
        fused = {}
        for rule in ("default", "all", "0"):
            env = dict(os.environ)
            env["TSR_DUMP_TILE"] = "1"
            env.pop("TSR_EPILOGUE", None)
            if rule != "default":
                env["TSR_EPILOGUE"] = rule
            fused[rule] = 0
            for g in graphs:
                r = run([check, g, "--sizes", SIZES] + extra, env=env)
                sys.stdout.write(r.stdout)
                fused[rule] += len(FUSED.findall(r.stderr))
                if r.crash or not r.ok or not re.search(r"^\d+ passed, 0 failed$", r.stdout, re.M):
                    print(f"FAIL epilogue ({rule}): {os.path.basename(g)}: compiled results differ from the evaluator"
                          + (f" ({r.crash})" if r.crash else ""))
                    sys.stderr.write(r.stderr[-3000:])
                    failed += 1
        print(f"products that took their epilogue: default {fused['default']}, all {fused['all']}, none {fused['0']}")
        if not (0 < fused["default"] < fused["all"]) or fused["0"] != 0:
            print("FAIL epilogue: the rules did not fuse as they say")
            failed += 1
    if not failed:
        print("PASS epilogue: every rule matches the evaluator")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
