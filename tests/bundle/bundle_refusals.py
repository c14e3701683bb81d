#!/usr/bin/env python3
"""ctest bundle_refusals: a corpus of damaged and foreign bundles, each refused with its own
message and exit code 3, never a crash.

    bundle_refusals.py TSRC TSR CHECK [CHECK_ASAN] ROOT

Makes one bundle of tests/bundle/programs/refusals.tsr (cpu code, and PTX for sm_80 with cubins
where ptxas is found, every program of a short traced run), then runs `tsr run` and the reader
alone (CHECK: tsr-bundle-check; CHECK_ASAN: the same built with AddressSanitizer and UBSan) on:
- the bundle cut at every section's start, middle and end, inside the header, the table and the
  trailer, and at 24 random points: "truncated";
- one byte flipped in every section ("section N (...) fails its CRC-32"), in the prelude, the
  header, the table, the padding and the trailer (each its own message), and at 64 random places;
- foreign files (an ELF header, a text file, an empty file);
- versions: format 2.0 and code ABI 2 refused, format 1.7 and another compiler accepted;
- architectures: cpu code for aarch64, a CPU lacking an extension the code uses, a cpu-only bundle
  on --device cuda, a cuda-only bundle on the CPU, sm_90 code on an sm_80 GPU (the reader alone);
- manifests that contradict the sections (checksums right, contents wrong).
Altered bundles are written by tests/bundle/bundlefile.py, a second implementation of the format,
which must also reproduce the C++ writer's bytes exactly; the bundle's two Graph IR sections (the
graphs that lower before run time, the trace run's) must parse back with tsrc --read-graph.

TSR_BUNDLE_TEST_SKIP_CHECKSUMS=1 (the reader's test-only switch) makes this test fail: its
negative control.
"""
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bundlefile  # noqa: E402
from testlib import run, summary  # noqa: E402

passed = failed = 0


def report(ok, name, why=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}: {why}")


def main():
    args = [os.path.abspath(a) for a in sys.argv[1:]]
    if len(args) == 4:
        tsrc, tsr, check, root = args
        check_asan = None
    else:
        tsrc, tsr, check, check_asan, root = args
    program = os.path.join(root, "tests", "bundle", "programs", "refusals.tsr")
    work = tempfile.mkdtemp(prefix="tsr-bundle-refusals-")
    try:
        good_path = os.path.join(work, "good.bundle")
        r = run([tsrc, program, "-o", good_path, "--target", "cpu,cuda", "--arch", "sm_80", "--trace", "--steps 3"], cwd=work)
        if r.returncode != 0 or r.crash:
            print(f"FAIL making the bundle: exit {r.returncode}\n{r.stderr}")
            return 1
        good = open(good_path, "rb").read()
        b = bundlefile.read(good)
        report(bundlefile.write(b) == good, "model", "tests/bundle/bundlefile.py does not reproduce the writer's bytes")
        # The Graph IR sections (the static graphs, the trace run's) parse back (tsrc --read-graph).
        irs = [s for s in b.sections if s.kind == 3]
        report(len(irs) == 2, "graph-ir sections", f"{len(irs)} graph-ir sections, expected 2 (static and trace)")
        for i, s in enumerate(irs):
            path = os.path.join(work, f"ir{i}.graph")
            with open(path, "wb") as f:
                f.write(s.data)
            r = run([tsrc, path, "--read-graph"], cwd=work)
            report(r.returncode == 0 and not r.crash and r.stdout.strip() == s.data.decode().strip(), f"graph-ir section {i} parses back",
                   f"exit {r.returncode}: {r.stderr[-1000:]}")
        print(f"bundle: {len(good)} bytes, {len(b.sections)} sections: " +
              ", ".join(f"{i} {bundlefile.KINDS.get(s.kind, s.kind)} {s.offset}+{len(s.data)}" for i, s in enumerate(b.sections)))

        n = [0]

        def case(name, data, want, exit_code=3, device=None, env=None, run_tsr=True, check_device=None):
            """Writes `data`, runs tsr and the reader(s) on it: each must exit `exit_code` with
            /want/ in its output (want None: no refusal expected)."""
            n[0] += 1
            path = os.path.join(work, f"case{n[0]}.bundle")
            with open(path, "wb") as f:
                f.write(data)
            e = dict(os.environ)
            e.update(env or {})
            runs = []
            if run_tsr:
                cmd = [tsr, "run", path] + (["--device", device] if device else []) + ["--steps", "2"]
                runs.append(("tsr run", cmd))
            for label, exe in (("check", check), ("check-asan", check_asan)):
                if exe:
                    runs.append((label, [exe, path] + (["--device", check_device] if check_device else [])))
            for label, cmd in runs:
                res = run(cmd, env=e, timeout=120, cwd=work)
                out = res.stdout + res.stderr
                if res.crash:
                    report(False, f"{name} [{label}]", res.crash + "\n" + out[-2000:])
                elif res.returncode != exit_code:
                    report(False, f"{name} [{label}]", f"exit {res.returncode}, expected {exit_code}\n" + out[-2000:])
                elif want and not re.search(want, out):
                    report(False, f"{name} [{label}]", f"the output lacks /{want}/:\n" + out[-2000:])
                else:
                    report(True, name)
            os.remove(path)

        size = len(good)
        trailer = size - bundlefile.TRAILER
        # ---- truncation ----
        cuts = {0: "the file is empty", 5: "a part of the magic", 12: "ends inside the 16-byte prelude", 40: "ends inside the 64-byte header",
                bundlefile.HEADER + 10: "ends inside the section table", trailer + 4: "ends inside the trailer"}
        for i, s in enumerate(b.sections):
            cuts.setdefault(s.offset, f"ends inside (section {i}|the padding before section {i})" if s.data else "truncated")
            if len(s.data) > 1:
                cuts.setdefault(s.offset + len(s.data) // 2, rf"ends inside section {i} \(")
            cuts.setdefault(s.end, "truncated")
        rng = random.Random(20261124)
        for k in range(24):
            cuts.setdefault(rng.randrange(1, size), "truncated")
        for at, what in sorted(cuts.items()):
            case(f"cut at {at}", good[:at], "truncated: .*" + what if what != "truncated" else "truncated: ")

        # ---- flipped bytes ----
        def flip(at):
            m = bytearray(good)
            m[at] ^= 0x20
            return bytes(m)

        for i, s in enumerate(b.sections):
            if s.data:
                case(f"flip in section {i}", flip(s.offset + len(s.data) // 2), rf"corrupted: section {i} \(.*\) fails its CRC-32")
        case("flip in the version", flip(9), r"corrupted: the prelude .* fails its CRC-32")
        case("flip in the header", flip(33), r"corrupted: the header \(bytes 0\.\.64\) fails its CRC-32")
        case("flip in the table", flip(bundlefile.HEADER + 8), r"corrupted: the section table .* fails its CRC-32")
        gaps = [s.end for s in b.sections if s.end % bundlefile.ALIGN]
        if gaps:
            case("flip in the padding", flip(gaps[0]), r"corrupted: the whole-file CRC-32 fails .* a byte between the sections changed")
        case("flip in the whole-file checksum", flip(trailer + 9), r"corrupted: the whole-file CRC-32 fails")
        case("flip in the end magic", flip(trailer + 2), r"corrupted: the trailer .* is not \"TSRBEND")
        case("bytes after the end", good + b"\0" * 64, r"corrupted: 64 bytes follow the end of the bundle")
        for k in range(64):
            at = rng.randrange(0, size)
            case(f"random flip at {at}", flip(at), r"(corrupted|not a bundle): ", run_tsr=k % 4 == 0)

        # ---- foreign files ----
        case("an ELF file", b"\x7fELF\x02\x01\x01" + b"\0" * 57, r"not a bundle: a Tessera bundle starts with 89 54 53 52.*this file starts with 7f 45 4c 46")
        case("a text file", b"def main():\n    print(1)\n", r"not a bundle: .*this file starts with 64 65 66 20")
        case("the magic replaced", b"\x89TSRBNE\n" + good[8:], r"not a bundle: ")

        # ---- versions ----
        def altered(major=None, minor=None, edit=None):
            c = bundlefile.read(good)
            if major is not None:
                c.major = major
            if minor is not None:
                c.minor = minor
            m = c.manifest
            m["format"] = f"{c.major}.{c.minor}"
            if edit:
                edit(m, c)
            return bundlefile.write(c.with_manifest(m))

        case("format 2.0", altered(major=2, minor=0), r"version mismatch: the bundle is format 2\.0; this reader reads format 1\.x")
        case("format 1.7 (a newer minor version)", altered(minor=7), None, exit_code=0)
        case("code ABI 2", altered(edit=lambda m, c: m.update(abi=2)), r"version mismatch: the bundle's code ABI is 2; this runner runs ABI 1")
        case("another compiler", altered(edit=lambda m, c: m.update(compiler="tsrc 9.9 (Tessera)")), r"made by tsrc 9\.9", exit_code=0,
             env={"TSR_BUNDLE_VERBOSE": "1"}, run_tsr=True)

        # ---- architectures ----
        def cpu_only(m, c):
            del m["targets"]["cuda"]
            m["programs"] = [p for p in m["programs"] if p["target"] == "cpu"]

        def cuda_only(m, c):
            del m["targets"]["cpu"]
            m["programs"] = [p for p in m["programs"] if p["target"] == "cuda"]

        def sm90_only(m, c):
            cuda_only(m, c)
            m["targets"]["cuda"]["archs"][0]["arch"] = "sm_90"
            for p in m["programs"]:
                p["cuda"] = {"sm_90": p["cuda"]["sm_80"]}

        aarch64 = altered(edit=lambda m, c: m["targets"]["cpu"].update(triple="aarch64-unknown-linux-gnu", cpu="neoverse-v2"))
        case("cpu code for aarch64", aarch64, r"no code for the device: the bundle's cpu code is for aarch64 \(aarch64-unknown-linux-gnu\); this machine is x86_64",
             check_device="cpu")
        feats = b.manifest["targets"]["cpu"]["features"]
        lack = next((f for f in ("avx2", "sse4.2", "sse2") if f in feats), None)
        if lack:
            case(f"a CPU without {lack}", good, rf"no code for the device: the bundle's cpu code is for \S+ \(x86_64\) and uses {re.escape(lack)}, which this CPU lacks",
                 env={"TSR_BUNDLE_TEST_CPU_LACKS": lack}, check_device="cpu")
        else:
            report(False, "a CPU lacking an extension", f"the bundle's cpu features {feats} name none of avx2, sse4.2, sse2")
        case("a cpu-only bundle on --device cuda", altered(edit=cpu_only), r"no code for the device: the bundle has code for the cpu only; the device is cuda:0",
             device="cuda", check_device="cuda:sm_90")
        case("a cuda-only bundle on the cpu", altered(edit=cuda_only), r"no code for the device: the bundle has code for cuda \(sm_80\) only; the device is the cpu",
             device="cpu", check_device="cpu")
        case("sm_90 code on an sm_80 GPU", altered(edit=sm90_only), r"no code for the device: the bundle has code for sm_90 only; the device cuda:0 is sm_80",
             run_tsr=False, check_device="cuda:sm_80")
        case("sm_80 code on an sm_90 GPU", altered(edit=cuda_only), None, exit_code=0, run_tsr=False, check_device="cuda:sm_90")

        # ---- manifests that contradict the bundle ----
        def bad_span(m, c):
            m["programs"][0]["text"][1] = 1 << 40

        def bad_key(m, c):
            m["programs"][0]["key"] = "0" * 16

        def bad_section(m, c):
            m["modules"][0]["section"] = 0

        case("a program's text out of its section", altered(edit=bad_span), r"corrupted: the manifest's programs\[0\]\.text reaches past the end of section")
        case("a key that is not its text's", altered(edit=bad_key), r"corrupted: the manifest's programs\[0\]\.key is not the key of the program's text")
        case("a module in the manifest's section", altered(edit=bad_section), r"corrupted: the manifest's modules\[0\]\.section names section 0, a manifest section, not module")
        case("a manifest that is not JSON", bundlefile.write(_raw_manifest(good, b"{not json")),
             r"corrupted: the manifest is not JSON")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return summary(passed, failed, minimum=150)


def _raw_manifest(good, raw):
    c = bundlefile.read(good)
    c.sections[0].data = raw
    return c


if __name__ == "__main__":
    sys.exit(main())
