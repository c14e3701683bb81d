#!/usr/bin/env python3
"""ctest bundle_runner_nollvm: tools/tsr-run-bundle, the runner built without a compiler, has no
LLVM in it and runs traced bundles as `tsr run` runs their sources.

    bundle_runner_nollvm.py TSRC TSR RUNNER ROOT BUILD_DIR
    bundle_runner_nollvm.py TSRC TSR RUNNER ROOT BUILD_DIR --only NAME   (tests/bundle/programs/NAME.tsr
                                                             alone, for a negative control)
    bundle_runner_nollvm.py --links-only BINARY BUILD_DIR   (the link check alone: its negative
                                                             control runs it on `tsr`)

1. Links: the runner's link line in BUILD_DIR/build.ninja names no codegen library (tsr_codegen,
   tsr_nvptx, tsr_exec_backend, tsr_cuda_exec) and no LLVM library; its symbols (nm) hold nothing
   of namespace llvm or tsr::codegen; ldd lists no libLLVM; it exports the generated code's helpers
   (tsr_cg_*), which a bundle's CPU code links against. The same checks on `tsr` must find LLVM
   (else they could not fail).
2. Runs: every example with a main and every program of tests/run that ends with exit 0, bundled
   with `tsrc -o X.bundle --target cpu --trace "FLAGS"`, then run by the runner alone in an empty
   folder (TESSERA_STDLIB and TESSERA_PATH at broken modules): same exit code and standard output
   as `tsr run SOURCE FLAGS` (times masked), the same files written, and every program from the
   bundle (`N programs from the bundle, 0 compiled here`; N >= 1 for the examples). The programs of
   tests/bundle/programs with a `# stdout:` block run the same way, their output checked against it
   too (scalar_views: `x[i]` after a kernel launch, whose rank-0 `copy` the bundle must hold).
3. Refusals: a bundle made without --trace lacks programs: the runner exits 3 naming the first
   (`the program `ew` (key ...) is not in the bundle for cpu`), where `tsr run` compiles it and
   prints the source's output; the runner with the bundle's code ignored
   (TSR_BUNDLE_TEST_IGNORE_CODE=1) fails the same way; a damaged bundle is refused (exit 3).
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

# The examples' flags for a short run (digits_vit is left to bundle_roundtrip: a minute of trace).
FLAGS = {"train_regression": ["--steps", "100"]}
SKIP_EXAMPLES = {"digits_vit"}
COMPILER_LIBS = ("tsr_codegen", "tsr_nvptx", "tsr_exec_backend", "tsr_cuda_exec", "libLLVM", "/llvm-19/")

tally = Tally()
report = tally.report


def link_line(build, binary):
    """LINK_LIBRARIES of `binary`'s link edge in build.ninja (relative to the build folder)."""
    rel = os.path.relpath(os.path.realpath(binary), os.path.realpath(build))
    lines = open(os.path.join(build, "build.ninja"), encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        if line.startswith(f"build {rel}:") and "LINKER" in line:
            for follow in lines[i + 1:i + 40]:
                if follow.strip().startswith("LINK_LIBRARIES ="):
                    return follow.split("=", 1)[1]
                if follow.startswith("build "):
                    break
    return None


def llvm_in(binary, build):
    """What of LLVM or codegen the binary holds, as a list of findings (empty: none)."""
    found = []
    libs = link_line(build, binary)
    if libs is None:
        found.append(f"no link line for {binary} in build.ninja")
    else:
        found += [f"link line names {lib}" for lib in COMPILER_LIBS if lib in libs]
    nm = run(["nm", "-C", binary])
    if not nm.ok:
        found.append(f"nm failed: {nm.stderr.strip()}")
    else:
        syms = [ln for ln in nm.stdout.splitlines() if " llvm::" in ln or " tsr::codegen::" in ln]
        if syms:
            found.append(f"{len(syms)} symbols of llvm:: or tsr::codegen:: (first: {syms[0].split(' ', 2)[-1][:100]})")
    ldd = run(["ldd", binary])
    found += [f"ldd: {ln.strip()}" for ln in ldd.stdout.splitlines() if "LLVM" in ln]
    return found


def check_links(runner, tsr, build):
    found = llvm_in(runner, build)
    report(not found, "the runner links no LLVM or codegen", "; ".join(found))
    exported = run(["nm", "-D", "--defined-only", runner]).stdout
    names = sorted(set(re.findall(r"\b(tsr_cg_\w+)\b", exported)))
    report(len(names) == 5, "the runner exports the generated code's helpers", f"exports {names}")
    control = llvm_in(tsr, build)
    report(any("symbols of llvm::" in f for f in control) and any("link line names" in f for f in control),
           "control: the same checks find LLVM in tsr", f"found only {control}")


def run_programs_flags(path, root):
    """(flags, exit code, env) of a tests/run program (its `# args:`, `# exit:`, `# env:` lines)."""
    args, code, env = [], 0, {}
    for line in open(path, encoding="utf-8"):
        if line.startswith("# args:"):
            args = [a.replace("{root}", root) for a in line[7:].split()]
        elif line.startswith("# exit:"):
            code = int(line[7:])
        elif line.startswith("# env:"):
            env[line[6:].strip().partition("=")[0]] = line[6:].strip().partition("=")[2]
    return args, code, env


def expected_stdout(path):
    """The `# stdout:` block of a program (`# | LINE` lines), or None without one."""
    lines = open(path, encoding="utf-8").read().split("\n")
    if "# stdout:" not in lines:
        return None
    block = lines[lines.index("# stdout:") + 1:]
    return "".join(ln[4:] + "\n" for ln in block if ln.startswith("# | ") or ln == "# |")


def roundtrip(tsrc, tsr, runner, work, name, src, flags, need_programs, expect=None):
    base = os.path.join(work, name)
    os.makedirs(base)
    bundle = os.path.join(base, name + ".bundle")
    env = dict(os.environ, TSR_JIT_THRESHOLD="0")
    made = run([tsrc, src, "-o", bundle, "--target", "cpu", "--trace", " ".join(flags)], cwd=base, env=env, timeout=900)
    if not made.ok:
        return report(False, name, f"tsrc -o failed (exit {made.returncode}): {made.stderr.strip()[-600:]}")
    srcdir = os.path.join(base, "source-run")
    os.makedirs(srcdir)
    want = run([tsr, "run", src] + flags, cwd=srcdir, env=env, timeout=900)
    alone = os.path.join(base, "alone")
    os.makedirs(alone)
    shutil.copy(bundle, alone)
    stdlib, path = broken_module_folders(os.path.join(base, "broken"))
    got = run([runner, name + ".bundle"] + flags, cwd=alone, timeout=900,
              env=dict(env, TSR_BUNDLE_VERBOSE="1", TESSERA_STDLIB=stdlib, TESSERA_PATH=path))
    problems = []
    if got.crash:
        problems.append(got.crash)
    if got.returncode != want.returncode:
        problems.append(f"exit {got.returncode}, the source's {want.returncode}: {got.stderr.strip()[-800:]}")
    if TIME.sub("T", got.stdout) != TIME.sub("T", want.stdout):
        problems.append(f"stdout differs:\n--- tsr run {name}.tsr\n{want.stdout}--- tsr-run-bundle\n{got.stdout}")
    if expect is not None and want.stdout != expect:
        problems.append(f"tsr run's stdout is not the program's `# stdout:`:\n--- expected\n{expect}--- got\n{want.stdout}")
    wrote = [f for f in files_in(alone) if f != name + ".bundle"]
    if wrote != files_in(srcdir):
        problems.append(f"wrote {wrote}, the source's run wrote {files_in(srcdir)}")
    m = COUNT.search(got.stderr)
    if not m:
        problems.append("no count line: " + got.stderr.strip()[-400:])
    elif int(m.group(2)) != 0:
        problems.append(f"{m.group(2)} programs compiled by a runner without a compiler")
    elif need_programs and int(m.group(1)) == 0:
        problems.append("no program came from the bundle")
    if problems:
        return report(False, name, "; ".join(problems))
    print(f"     {name}: {m.group(1)} programs from the bundle, exit {got.returncode}")
    report(True, name)


def refusals(tsrc, tsr, runner, root, work):
    base = os.path.join(work, "refusals")
    os.makedirs(base)
    gemm = os.path.join(root, "examples", "gemm.tsr")
    bundle = os.path.join(base, "gemm.bundle")
    made = run([tsrc, gemm, "-o", bundle, "--target", "cpu"], cwd=base)
    if not made.ok:
        return report(False, "refusals: tsrc -o gemm", made.stderr.strip())
    got = run([runner, bundle], cwd=base)
    missing = re.search(r"the program `\w+` \(key [0-9a-f]{16}\) is not in the bundle for cpu", got.stderr)
    report(got.returncode == 3 and missing is not None and not got.crash, "a bundle without --trace: the runner names the missing program",
           f"exit {got.returncode}: {got.stderr.strip()[-600:]}")
    compiled = run([tsr, "run", bundle], cwd=base)
    report(compiled.ok and "rel_err" in compiled.stdout, "control: tsr run compiles what the same bundle lacks",
           f"exit {compiled.returncode}: {compiled.stderr.strip()[-400:]}")
    traced = os.path.join(base, "saxpy.bundle")
    if run([tsrc, os.path.join(root, "examples", "saxpy.tsr"), "-o", traced, "--target", "cpu", "--trace", ""], cwd=base).ok:
        ignored = run([runner, traced], cwd=base, env=dict(os.environ, TSR_BUNDLE_TEST_IGNORE_CODE="1"))
        report(ignored.returncode == 3 and "is not in the bundle for cpu" in ignored.stderr, "the bundle's code ignored: the runner has nothing to run",
               f"exit {ignored.returncode}: {ignored.stderr.strip()[-400:]}")
        damaged = os.path.join(base, "damaged.bundle")
        data = bytearray(open(traced, "rb").read())
        data[len(data) // 2] ^= 0xFF
        open(damaged, "wb").write(bytes(data))
        refused = run([runner, damaged], cwd=base)
        report(refused.returncode == 3 and "tsr-run-bundle: " in refused.stderr and "corrupted" in refused.stderr,
               "a damaged bundle is refused", f"exit {refused.returncode}: {refused.stderr.strip()}")
    else:
        report(False, "refusals: tsrc -o saxpy --trace")
    usage = run([runner])
    report(usage.returncode == 2 and "usage: tsr-run-bundle" in usage.stderr, "no file: usage, exit 2", f"exit {usage.returncode}")


def main():
    if sys.argv[1:2] == ["--links-only"]:
        found = llvm_in(sys.argv[2], sys.argv[3])
        report(not found, f"{os.path.basename(sys.argv[2])} links no LLVM or codegen", "; ".join(found))
        return tally.summary(minimum=1, what="checks")
    tsrc, tsr, runner, root, build = (os.path.abspath(a) for a in sys.argv[1:6])
    only = sys.argv[7] if sys.argv[6:7] == ["--only"] else None
    if only:
        with tempfile.TemporaryDirectory() as work:
            src = os.path.join(root, "tests", "bundle", "programs", only + ".tsr")
            roundtrip(tsrc, tsr, runner, work, "bundle_" + only, src, [], True, expected_stdout(src))
        return tally.summary(minimum=1, what="checks")
    check_links(runner, tsr, build)
    with tempfile.TemporaryDirectory() as work:
        for src in sorted(glob.glob(os.path.join(root, "tests", "bundle", "programs", "*.tsr"))):
            expect = expected_stdout(src)
            if expect is not None:
                roundtrip(tsrc, tsr, runner, work, "bundle_" + os.path.basename(src)[:-4], src, [], True, expect)
        for src in sorted(glob.glob(os.path.join(root, "examples", "*.tsr"))):
            name = os.path.basename(src)[:-4]
            if name in SKIP_EXAMPLES or "def main(" not in open(src, encoding="utf-8").read():
                continue
            roundtrip(tsrc, tsr, runner, work, name, src, FLAGS.get(name, []), True)
        for src in sorted(glob.glob(os.path.join(root, "tests", "run", "*.tsr"))):
            flags, code, env = run_programs_flags(src, root)
            if code == 0 and not env:
                roundtrip(tsrc, tsr, runner, work, "run_" + os.path.basename(src)[:-4], src, flags, False)
        refusals(tsrc, tsr, runner, root, work)
    return tally.summary(minimum=12, what="checks")


if __name__ == "__main__":
    sys.exit(main())
