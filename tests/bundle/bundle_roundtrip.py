#!/usr/bin/env python3
"""ctest bundle_roundtrip: every program of examples/ that has a `main` runs the same from its
bundle, alone in an empty folder, as from its source, and the bundle's code is what ran.

    bundle_roundtrip.py TSRC TSR ROOT [--only EXAMPLE]

(--only: that example's traced round trip alone, for the negative control.)

For each example (with the flags FLAGS below; digits_vit one tiny epoch):
1. `tsrc EXAMPLE -o X.bundle --target cpu --trace "FLAGS"` (the programs of that run);
2. `tsr run EXAMPLE FLAGS` from the source;
3. the bundle copied alone into an empty temporary folder and `tsr run X.bundle FLAGS` run there,
   with TESSERA_STDLIB and TESSERA_PATH pointing at folders of broken modules (so a module read
   from anywhere but the bundle fails the run), under TSR_BUNDLE_VERBOSE=1;
and checks: both exit 0, print the same standard output (times like `3.8s` masked), write the
same files, the folder holds nothing else, and the runner's count line says the bundle's code
ran: `tsr: bundle: N programs from the bundle, 0 compiled here` with N >= 1. Both runs use
TSR_JIT_THRESHOLD=0 (every step compiled) so that their numerics are the same code's.
Then two bundles made without --trace (the programs known before run time) must still serve at
least one program each, two with --cpu x86-64-v3 and x86-64 (code for another CPU than this one)
must run the same, digits_vit's traced bundle made twice must be the same file (a bundle for
another CPU must not: the comparison's control), and the command line's errors are checked (exit 2 for usage, 1 for a failed
trace run or an unwritable output).

TSR_BUNDLE_TEST_IGNORE_CODE=1 (the runner's test-only switch: compile everything) makes this
test fail: its negative control.
"""
import glob
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import run, Tally  # noqa: E402
from bundlerun import COUNT, TIME, broken_module_folders, files_in  # noqa: E402

# Flags of the examples whose defaults are too long for a test (`{root}`: the source tree). Files
# they write are named relative to the run's folder, so both runs print the same line.
FLAGS = {
    "digits_vit": ["--epochs", "1", "--train_limit", "64", "--out", "curve.svg", "--data", "{root}/examples/data/digits.csv.gz"],
    "train_regression": ["--steps", "100"],
}
STATIC = {"gemm": [], "transformer_block": []}
# Bundles whose cpu code is for an x86-64 level rather than this machine's CPU (tsrc --cpu).
PORTABLE = {"transformer_block": "x86-64-v3", "train_regression": "x86-64"}

tally = Tally()
report = tally.report


def roundtrip(tsrc, tsr, root, work, name, flags_t, trace, cpu=None):
    src = os.path.join(root, "examples", name + ".tsr")
    made = os.path.join(work, name + ("" if trace else ".static") + (f".{cpu}" if cpu else "") + ".bundle")
    src_dir = tempfile.mkdtemp(dir=work, prefix="source-")
    run_dir = tempfile.mkdtemp(dir=work, prefix="bundle-")
    flags = [a.format(root=root) for a in flags_t]
    label = f"{name}{'' if trace else ' (no --trace)'}{f' (--cpu {cpu})' if cpu else ''}"
    cmd = [tsrc, src, "-o", made, "--target", "cpu"] + (["--cpu", cpu] if cpu else [])
    if trace:
        cmd += ["--trace", " ".join(flags)]
    r = run(cmd, cwd=tempfile.mkdtemp(dir=work, prefix="trace-"), timeout=1200)
    if r.returncode != 0 or r.crash:
        report(False, label, f"tsrc -o: {r.crash or 'exit ' + str(r.returncode)}\n{r.stderr[-3000:]}")
        return
    env = dict(os.environ, TSR_JIT_THRESHOLD="0")
    source = run([tsr, "run", src] + flags, cwd=src_dir, env=env, timeout=1200)
    if source.returncode != 0 or source.crash:
        report(False, label, f"the source run: {source.crash or 'exit ' + str(source.returncode)}\n{source.stderr[-3000:]}")
        return
    shutil.copy(made, os.path.join(run_dir, "program.bundle"))
    std, path = broken_module_folders(os.path.join(work, "broken"))
    benv = dict(env, TSR_BUNDLE_VERBOSE="1", TESSERA_STDLIB=std, TESSERA_PATH=path)
    b = run([tsr, "run", "program.bundle"] + flags, cwd=run_dir, env=benv, timeout=1200)
    problems = []
    if b.crash or b.returncode != 0:
        problems.append(f"the bundle run: {b.crash or 'exit ' + str(b.returncode)}\n{b.stderr[-3000:]}")
    else:
        if TIME.sub("Ts", b.stdout) != TIME.sub("Ts", source.stdout):
            problems.append(f"standard output differs:\n--- source\n{source.stdout[-2000:]}\n--- bundle\n{b.stdout[-2000:]}")
        wrote_src = files_in(src_dir)
        wrote_b = [f for f in files_in(run_dir) if f != "program.bundle"]
        if wrote_src != wrote_b:
            problems.append(f"the runs wrote different files: source {wrote_src}, bundle {wrote_b}")
        for f in wrote_src:
            if f in wrote_b and open(os.path.join(src_dir, f), "rb").read() != open(os.path.join(run_dir, f), "rb").read():
                problems.append(f"{f} differs between the runs")
        counts = COUNT.findall(b.stderr)
        if len(counts) != 1:
            problems.append("no `tsr: bundle: N programs from the bundle, M compiled here` line (TSR_BUNDLE_VERBOSE=1)")
        else:
            used, compiled = int(counts[0][0]), int(counts[0][1])
            print(f"     {label}: {used} programs from the bundle, {compiled} compiled")
            if used < 1:
                problems.append(f"no program came from the bundle ({compiled} compiled)")
            if trace and compiled != 0:
                missing = [ln for ln in b.stderr.splitlines() if "compiling program" in ln]
                problems.append(f"{compiled} programs of the traced run were not in the bundle:\n" + "\n".join(missing[:10]))
    report(not problems, label, "\n".join(problems))


def first_difference(a, b):
    """None when the files are byte for byte the same, else where they first differ."""
    x, y = open(a, "rb").read(), open(b, "rb").read()
    if x == y:
        return None
    at = next((i for i in range(min(len(x), len(y))) if x[i] != y[i]), min(len(x), len(y)))
    return f"sizes {len(x)} and {len(y)}, first difference at byte {at}"


def reproducible(tsrc, root, work, name):
    """The traced bundle made again from the same source and flags is the same file (its fusion
    schedules and programs do not depend on where objects happened to be allocated). Control: the
    same comparison sees a bundle made for another CPU level as different."""
    src = os.path.join(root, "examples", name + ".tsr")
    flags = " ".join(a.format(root=root) for a in FLAGS.get(name, []))
    made = []
    for extra in ([], [], ["--cpu", "x86-64"]):
        out = os.path.join(work, f"again-{len(made)}.bundle")
        r = run([tsrc, src, "-o", out, "--target", "cpu", "--trace", flags] + extra,
                cwd=tempfile.mkdtemp(dir=work, prefix="again-"), timeout=1200)
        if r.returncode != 0 or r.crash:
            report(False, f"{name}: the same bundle twice", f"tsrc -o: {r.crash or 'exit ' + str(r.returncode)}\n{r.stderr[-2000:]}")
            return
        made.append(out)
    diff = first_difference(made[0], made[1])
    report(diff is None, f"{name}: the same bundle twice", f"two bundles of one source and flags differ: {diff}")
    report(first_difference(made[0], made[2]) is not None, f"{name}: the same bundle twice (control: another --cpu differs)",
           "a bundle for x86-64 compared equal to one for this CPU: the comparison cannot fail")


def cli_checks(tsrc, root, work):
    ex = os.path.join(root, "examples", "saxpy.tsr")
    cases = [
        ("-o with --check", [tsrc, ex, "-o", "x.bundle", "--check"], 2, r"-o writes a bundle; it does not combine with --check or --emit"),
        ("--emit=ptx with two archs", [tsrc, ex, "--emit=ptx", "--arch", "sm_80,sm_90"], 2, r"compiles for one architecture"),
        ("--target without -o", [tsrc, ex, "--check", "--target", "cpu"], 2, r"apply to a bundle: add -o"),
        ("an unknown target", [tsrc, ex, "-o", "x.bundle", "--target", "gpu"], 2, r"`gpu` is not cpu or cuda"),
        ("an unknown arch", [tsrc, ex, "-o", "x.bundle", "--arch", "sm_80,sm_75"], 2, r"`sm_75` is not sm_80 or sm_90"),
        ("an unknown cpu", [tsrc, ex, "-o", "x.bundle", "--cpu", "skylake"], 2, r"--cpu: skylake not in \{host,x86-64,x86-64-v2,x86-64-v3,x86-64-v4\}"),
        ("--cpu without -o", [tsrc, ex, "--check", "--cpu", "x86-64-v3"], 2, r"--target, --cpu, --specialize and --trace apply to a bundle"),
        ("a malformed --specialize", [tsrc, ex, "-o", "x.bundle", "--specialize", "n=-3"], 2, r"expected SYM=INT"),
        ("a --specialize that is not an integer", [tsrc, ex, "-o", "x.bundle", "--specialize", "n=4.5"], 2, r"--specialize n=4.5: expected SYM=INT"),
        ("an unknown --specialize symbol", [tsrc, ex, "-o", "x.bundle", "--target", "cpu", "--specialize", "nn=4"], 2,
         r"tsrc: --specialize nn=4: the program has no symbol `nn` \(its symbols: n, seed\)"),
        ("two values for one --specialize symbol", [tsrc, ex, "-o", "x.bundle", "--specialize", "n=4", "--specialize", "n=8"], 2,
         r"--specialize n=8: the symbol `n` is already given as 4"),
        ("nothing to do", [tsrc, ex], 2, r"nothing to do: use -o FILE.bundle, --check or --emit"),
        ("a failing trace run", [tsrc, ex, "-o", "x.bundle", "--target", "cpu", "--trace", "--n notanumber"], 1,
         r"tsrc: error: cannot make the bundle x.bundle: the trace run of main failed \(exit 2\)"),
        ("an unwritable output", [tsrc, ex, "-o", os.path.join(work, "no", "such", "folder", "x.bundle"), "--target", "cpu"], 1,
         r"tsrc: error: cannot write"),
    ]
    for label, cmd, code, want in cases:
        r = run(cmd, cwd=work, timeout=300)
        out = r.stdout + r.stderr
        ok = not r.crash and r.returncode == code and re.search(want, out)
        report(bool(ok), f"cli: {label}", f"exit {r.returncode} (expected {code}); output:\n{out[-1500:]}")
    report(not os.path.exists(os.path.join(work, "x.bundle")), "cli: no bundle after a failure", "x.bundle was written")
    # The control of the --specialize refusals: a symbol the program has, given twice alike, makes the bundle.
    r = run([tsrc, ex, "-o", "ok.bundle", "--target", "cpu", "--specialize", "n=4096", "--specialize", "n=4096"], cwd=work, timeout=300)
    report(not r.crash and r.returncode == 0 and os.path.exists(os.path.join(work, "ok.bundle")), "cli: a known --specialize symbol",
           f"exit {r.returncode}; output:\n{(r.stdout + r.stderr)[-1500:]}")


def main():
    tsrc, tsr, root = (os.path.abspath(a) for a in sys.argv[1:4])
    only = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--only" else None
    work = tempfile.mkdtemp(prefix="tsr-bundle-roundtrip-")
    try:
        names = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(root, "examples", "*.tsr"))
                       if re.search(r"^def main\(", open(p).read(), re.M))
        if only:
            roundtrip(tsrc, tsr, root, work, only, FLAGS.get(only, []), True)
            return tally.summary(minimum=1)
        for name in names:
            roundtrip(tsrc, tsr, root, work, name, FLAGS.get(name, []), True)
        for name, flags in STATIC.items():
            roundtrip(tsrc, tsr, root, work, name, flags, False)
        for name, cpu in PORTABLE.items():
            roundtrip(tsrc, tsr, root, work, name, FLAGS.get(name, []), True, cpu)
        reproducible(tsrc, root, work, "digits_vit")
        cli_checks(tsrc, root, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # Every example, the static and portable bundles, reproducibility and its control, the twelve
    # command-line checks; six examples at least.
    return tally.summary(minimum=max(len(names), 6) + len(STATIC) + len(PORTABLE) + 2 + 12)


if __name__ == "__main__":
    sys.exit(main())
