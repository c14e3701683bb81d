#!/usr/bin/env python3
"""ctest tsrc_aot_flags: tsrc's ahead-of-time flags (docs/cli.md): -O0..-O3, --target without -o,
--specialize values that contradict a launch, what -o leaves to run time, and --debug bundles
(their checked kernels run by tsr-run-bundle --debug; without --debug the runner lacks the
unchecked ones: exit 3 naming the program).

    aot_flags.py TSRC TSR TSR_RUN_BUNDLE ROOT

Each check runs tsrc (and for bundles tsr) and looks at the exit code and the message; each
refusal has a control that the same command with an agreeing value passes."""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import run, summary  # noqa: E402

tsrc, tsr, runner, root = (os.path.abspath(a) for a in sys.argv[1:5])
saxpy = os.path.join(root, "examples", "saxpy.tsr")
conflict = os.path.join(root, "tests", "bundle", "programs", "specialize_conflict.tsr")
loaded = os.path.join(root, "tests", "run", "kernel_loaded_arg.tsr")
passed = failed = 0


def check(label, cmd, code, want, cwd, lacks=None):
    global passed, failed
    r = run(cmd, cwd=cwd, timeout=600)
    out = r.stdout + r.stderr
    ok = not r.crash and r.returncode == code and re.search(want, out) and not (lacks and re.search(lacks, out))
    if ok:
        passed += 1
        print(f"ok   {label}")
    else:
        failed += 1
        print(f"FAIL {label}: exit {r.returncode} (expected {code}); output:\n{out[-1500:]}")
    return r


with tempfile.TemporaryDirectory() as work:
    # -O: the level reaches the code. -O0's host LLVM IR is the lowering's, before LLVM's passes
    # (no loop vectorized); at the default -O3 the loop vectorizer has run.
    check("-O0 --emit=llvm prints the IR before LLVM's passes", [tsrc, saxpy, "--emit=llvm", "-O0"], 0, r"define", work,
          lacks=r"llvm\.loop\.isvectorized")
    check("control: --emit=llvm at the default -O3 is optimized", [tsrc, saxpy, "--emit=llvm"], 0, r"llvm\.loop\.isvectorized", work)
    check("-O0 bundle runs as its source", [tsrc, saxpy, "-O0", "-o", "s0.bundle", "--target", "cpu"], 0, r"^$", work)
    check("-O0 bundle: tsr run", [tsr, "run", "s0.bundle"], 0, r"saxpy n=100003 max_abs_err=0\.000e\+00", work)
    check("-O with --check is a usage error", [tsrc, saxpy, "--check", "-O2"], 2, r"tsrc: -O2 sets the optimization .* --check has no code", work)
    check("-O4 is a usage error", [tsrc, saxpy, "--check", "-O4"], 2, r"-O: Value 4 not in range 0 to 3", work)
    # --target without -o: the compilation alone, nothing written.
    check("--target cpu without -o compiles and writes nothing", [tsrc, saxpy, "--target", "cpu", "-O1"], 0,
          r"tsrc: compiled 1 program for cpu at -O1; nothing written", work)
    check("--target cuda with --emit=llvm conflicts", [tsrc, saxpy, "--target", "cuda", "--emit=llvm"], 2,
          r"--target cuda conflicts with --emit=llvm, which prints the cpu target's code", work)
    check("control: --target cpu with --emit=llvm", [tsrc, saxpy, "--target", "cpu", "--emit=llvm"], 0, r"define", work)
    # --specialize against a launch's own values.
    check("--specialize BLOCK=128 against the launch's BLOCK=64", [tsrc, conflict, "--emit=tile", "--specialize", "BLOCK=128"], 2,
          r"tsrc: --specialize BLOCK=128: the launch of `scale` at .*specialize_conflict.tsr:12:5 passes `BLOCK` = 64", work)
    check("--specialize K=3 against the launch's default K=2", [tsrc, conflict, "--emit=ptx", "--specialize", "K=3"], 2,
          r"--specialize K=3: the launch of `scale` at .* takes the default `K` = 2", work)
    check("--specialize n=256 against the 300 the launch binds", [tsrc, conflict, "-o", "c.bundle", "--target", "cpu", "--specialize", "n=256"], 2,
          r"tsrc: --specialize n=256: the launch of `scale` at .* binds \"n\" \(axis 0 of `x`\) to 300", work)
    check("control: --specialize n=300 agrees", [tsrc, conflict, "-o", "c.bundle", "--target", "cpu", "--specialize", "n=300"], 0, r"^$", work)
    check("control: --specialize BLOCK=64 agrees", [tsrc, conflict, "--emit=tile", "--specialize", "BLOCK=64"], 0, r"tile @", work)
    # -o names the launches it leaves to run time, and why.
    check("-o lists the launches it could not specialize", [tsrc, loaded, "-o", "k.bundle", "--target", "cpu"], 0,
          r"tsrc: k\.bundle: 1 kernel launch is not compiled ahead of time:\n  .*kernel_loaded_arg\.tsr:12:38: this launch of `double` "
          r"is not compiled ahead of time: the type of its argument `x` is known only at run time", work)
    check("control: -o of a program whose launches all compile says nothing", [tsrc, saxpy, "-o", "s.bundle", "--target", "cpu"], 0,
          r"^$", work)
    # --debug bundles: traced with the checks, run with them by the runner without a compiler.
    dbg = os.path.join(root, "tests", "gpu", "debug_checks.tsr")
    check("tsrc --debug -o --trace", [tsrc, dbg, "--debug", "-o", "d.bundle", "--target", "cpu", "--trace", ""], 0, r"^$", work)
    check("tsr-run-bundle --debug runs the checked kernels", [runner, "d.bundle", "--debug"], 0, r"debug_checks ok 3\.84e\+04", work)
    check("control: tsr-run-bundle without --debug lacks the unchecked kernel", [runner, "d.bundle"], 3,
          r"error: the program `debug_checks\.shift_rows` \(key [0-9a-f]{16}\) is not in the bundle for cpu", work, lacks=r"internal")
sys.exit(summary(passed, failed, minimum=19, what="checks"))
