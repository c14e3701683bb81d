#!/usr/bin/env python3
"""ctest ordered_atomics_ptx: deterministic mode's ordered float atomics in the code the GPU runs,
checked without a GPU (codegen/llvm/OrderedAtomics.cpp has the algorithm).

    ordered_atomics_ptx.py TSRC PTXAS SOURCE_DIR

- Tile IR: `tsrc --deterministic` gives atomic_sum.tsr's kernel the ticket parameter and the
  config `ordered_atomics` naming it; without the flag, neither.
- PTX for sm_90 and sm_80, in this order: the program takes its number (atom.global.add.u32) before
  a barrier; thread 0 waits for its turn (ld.acquire.gpu.u32, nanosleep between tries); the float
  atomic; the turn passed on (st.release.gpu.u32). No %ctaid is read (program ids are the numbers),
  and no float atomic comes before the wait. The same checks must fail on the PTX made without
  --deterministic (the control).
- Both assemble with ptxas (-arch sm_90a and sm_80).
- Kernels without float atomics compile to the same PTX in both modes (saxpy), and a kernel whose
  only atomics are integer ones (debug mode's counts) takes no ticket.
Without ptxas the assembly checks are skipped (exit 77 if nothing else failed; a failure where
TSR_REQUIRE_PREREQS=1)."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from testlib import run, skip, Tally  # noqa: E402

tsrc, ptxas, src = sys.argv[1], sys.argv[2], sys.argv[3]
program = os.path.join(src, "tests", "determinism", "atomic_sum.tsr")
tally = Tally()
report = tally.report


def tsrc_out(*args):
    p = run([tsrc] + list(args), cwd=src, timeout=300)
    if not p.ok or p.crash:
        raise SystemExit(f"FAIL tsrc {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()[-400:]}")
    return p.stdout


def ordered_problems(ptx):
    """What the PTX of atomic_sum's kernel lacks of the ordered atomics (empty: none)."""
    steps = [("the program's number taken", r"atom\.global\.add\.u32\s"),
             ("a barrier after it", r"bar\.sync"),
             ("the wait for the turn", r"ld\.acquire\.gpu\.u32"),
             ("the float atomic", r"atom\.global\.add\.f32|red\.global\.add\.f32"),
             ("the turn passed on", r"st\.release\.gpu\.u32")]
    problems, at = [], 0
    for what, pattern in steps:
        m = re.compile(pattern).search(ptx, at)
        if not m:
            problems.append(f"no {what} ({pattern}) after offset {at}")
            break
        at = m.end()
    if "nanosleep" not in ptx:
        problems.append("no pause (nanosleep) in the wait")
    if re.search(r"%ctaid\.", ptx):
        problems.append("reads %ctaid (program ids must come from the order)")
    wait = ptx.find("ld.acquire.gpu.u32")
    early = re.search(r"atom\.global\.add\.f32|red\.global\.add\.f32", ptx)
    if early and (wait < 0 or early.start() < wait):
        problems.append("a float atomic before the wait")
    return problems


tile_det = tsrc_out(program, "--emit=tile", "--deterministic")
tile_plain = tsrc_out(program, "--emit=tile")
report("%atomic_ticket: tensor<1, i32>" in tile_det and re.search(r"ordered_atomics = \d+", tile_det) is not None,
       "Tile IR: the ticket parameter and ordered_atomics with --deterministic", tile_det.splitlines()[0] if tile_det else "")
report("atomic_ticket" not in tile_plain and "ordered_atomics" not in tile_plain, "Tile IR: neither without it",
       tile_plain.splitlines()[0] if tile_plain else "")

ptx = {}
for arch in ("sm_90", "sm_80"):
    ptx[arch] = tsrc_out(program, "--emit=ptx", "--arch", arch, "--deterministic")
    problems = ordered_problems(ptx[arch])
    report(not problems, f"PTX {arch}: number, barrier, wait, float atomic, hand-over, in order", "; ".join(problems))
    plain = tsrc_out(program, "--emit=ptx", "--arch", arch)
    report(bool(ordered_problems(plain)), f"control: the PTX {arch} without --deterministic fails these checks",
           "the checks pass on unordered code: they cannot tell the modes apart")

saxpy = os.path.join(src, "examples", "saxpy.tsr")
report(tsrc_out(saxpy, "--emit=ptx", "--deterministic") == tsrc_out(saxpy, "--emit=ptx"),
       "a kernel without float atomics: the same PTX in both modes", "the PTX differs")
debug = tsrc_out(os.path.join(src, "tests", "gpu", "debug_checks.tsr"), "--emit=tile", "--debug", "--deterministic")
report("debug_record" in debug and "atomic_ticket" not in debug,
       "integer atomics only (debug mode's counts): no ticket", "debug_record missing or a ticket added")

if not ptxas or "NOTFOUND" in ptxas or not os.access(ptxas, os.X_OK):
    if tally.failed:
        sys.exit(tally.summary(minimum=8, what="checks"))
    skip("ordered_atomics_ptx", "the CUDA toolkit's ptxas was not found (the PTX checks above passed)")
work = os.environ.get("TMPDIR", "/tmp")
for arch, target in (("sm_90", "sm_90a"), ("sm_80", "sm_80")):
    path = os.path.join(work, f"ordered_atomics_{os.getpid()}_{arch}.ptx")
    with open(path, "w") as f:
        f.write(ptx[arch])
    p = run([ptxas, f"-arch={target}", path, "-o", os.devnull], timeout=300)
    os.unlink(path)
    report(p.ok and not p.crash, f"ptxas -arch={target} assembles it", p.stderr.strip()[-400:])
sys.exit(tally.summary(minimum=10, what="checks"))
