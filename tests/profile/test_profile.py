#!/usr/bin/env python3
"""`tsr run --profile` on the CPU (ctest profile_cpu; docs/profiling.md).

  test_profile.py TSR TSRC TSR_RUN_BUNDLE FAKE_NVTX

Runs tests/profile/profiled.tsr with --profile and checks the trace with check_trace.py: the
Trace Event Format, and this run's spans (host statements, graph calls, steps, compilations,
launches on the host; kernels on device "cpu", each inside its launch), the host tensor memory
counter, the program's output unchanged by profiling. Then the same from a bundle, through
`tsr run FILE.bundle --profile` and `tsr-run-bundle --profile`; and the bad flags: --profile
without a file (exit 2), an unwritable path (exit 1, nothing run), and the checker's negative
control (check_trace.py --self-test: every broken copy of the trace is rejected). Last, NVTX
through a stand-in libnvToolsExt (fake_nvtx.cpp): balanced ranges named as the spans under
--profile or under Nsight Systems, none otherwise or without the library.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "profiled.tsr")
CHECKER = os.path.join(HERE, "check_trace.py")
failures = []


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


def expect(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


def check_trace(path, *extra):
    r = run([sys.executable, CHECKER, path, *extra])
    sys.stdout.write(r.stdout)
    return r.returncode == 0


def main():
    tsr, tsrc, run_bundle, fake_nvtx = sys.argv[1:5]
    env = dict(os.environ, TSR_NO_CACHE="1")
    with tempfile.TemporaryDirectory() as tmp:
        plain = run([tsr, "run", PROGRAM, "--device", "cpu"], env=env)
        expect(plain.returncode == 0, f"the program runs without --profile (rc {plain.returncode}: {plain.stderr.strip()[-300:]})")

        trace = os.path.join(tmp, "trace.json")
        r = run([tsr, "run", PROGRAM, "--device", "cpu", "--profile", trace], env=env)
        expect(r.returncode == 0, f"tsr run --profile exits 0 (rc {r.returncode}: {r.stderr.strip()[-300:]})")
        expect(r.stdout == plain.stdout, "the output is the same with --profile")
        full = ["--require-cat", "host", "--require-cat", "graph", "--require-cat", "step",
                "--require-cat", "compile", "--require-cat", "launch", "--require-cat", "kernel",
                "--require-counter", "tensor memory (host)", "--require-process", "device cpu",
                "--require-nested", "step:graph", "--require-nested", "graph:host", "--require-nested", "launch:host"]
        expect(check_trace(trace, *full), "the trace is valid and has every kind of span")
        with open(trace) as f:
            events = json.load(f)["traceEvents"]
        names = [e["name"] for e in events if e["ph"] == "X"]
        expect(any(n.startswith("x = layer(x, w)") for n in names), "a host statement is named by its text")
        expect(any(n == "main()" for n in names), "main's run is a span")
        expect(any(n.startswith("graph layer") for n in names), "the graph call of `layer` is a span")
        expect(names.count("check " + PROGRAM) == 1, "the checker's run is one compile span")
        stmt_spans = [e for e in events if e["ph"] == "X" and e["name"].startswith("x = layer(x, w)")]
        expect(len(stmt_spans) == 3, f"the loop's statement ran 3 times ({len(stmt_spans)} spans)")
        expect(all(e["args"]["at"].endswith("profiled.tsr:20:9") for e in stmt_spans), "statements carry their place")
        # Each device kernel lies inside a host launch span of the same name.
        launches = [e for e in events if e["ph"] == "X" and e.get("cat") == "launch"]
        kernels = [e for e in events if e["ph"] == "X" and e.get("cat") == "kernel"]
        inside = all(any(l["name"] == k["name"] and l["ts"] <= k["ts"] and k["ts"] + k["dur"] <= l["ts"] + l["dur"] + 1e-3
                         for l in launches) for k in kernels)
        expect(kernels and len(kernels) == len(launches) and inside,
               f"every launch has its kernel span on device cpu, inside it ({len(kernels)} kernels, {len(launches)} launches)")
        expect(any(k["name"].startswith("scale") or "scale" in k["name"] for k in kernels), "the @kernel launch is a kernel span")
        mem = [e["args"]["bytes"] for e in events if e["ph"] == "C"]
        expect(len(mem) > 10 and max(mem) > 0 and min(mem) >= 0, f"the memory counter moves ({len(mem)} samples, max {max(mem or [0])})")

        neg = run([sys.executable, CHECKER, trace, "--self-test"])
        sys.stdout.write(neg.stdout)
        expect(neg.returncode == 0, "check_trace.py rejects every broken copy of the trace (negative control)")

        # From a bundle: `tsr run FILE.bundle --profile` and the runner without LLVM.
        bundle = os.path.join(tmp, "profiled.bundle")
        b = run([tsrc, PROGRAM, "-o", bundle, "--target", "cpu", "--trace", ""], env=env)
        expect(b.returncode == 0, f"tsrc -o makes the bundle (rc {b.returncode}: {b.stderr.strip()[-300:]})")
        for name, cmd in [("tsr run FILE.bundle", [tsr, "run", bundle, "--device", "cpu"]),
                          ("tsr-run-bundle", [run_bundle, bundle, "--device", "cpu"])]:
            t = os.path.join(tmp, name.replace(" ", "_") + ".json")
            r = run(cmd + ["--profile=" + t], env=env)
            expect(r.returncode == 0 and r.stdout == plain.stdout,
                   f"{name} --profile runs as without it (rc {r.returncode}: {r.stderr.strip()[-300:]})")
            expect(check_trace(t, "--require-cat", "host", "--require-cat", "graph", "--require-cat", "step",
                               "--require-cat", "kernel", "--require-nested", "step:graph"),
                   f"{name}: the trace is valid")

        # Bad flags.
        r = run([tsr, "run", PROGRAM, "--device", "cpu", "--profile"], env=env)
        expect(r.returncode == 2 and "--profile needs a file" in r.stderr, f"--profile without a file: exit 2 ({r.returncode}: {r.stderr.strip()})")
        bad = os.path.join(tmp, "no", "such", "dir", "t.json")
        r = run([tsr, "run", PROGRAM, "--device", "cpu", "--profile", bad], env=env)
        expect(r.returncode == 1 and bad in r.stderr and r.stdout == "",
               f"an unwritable trace path: exit 1 naming it, before the run ({r.returncode}: {r.stderr.strip()})")
        r = run([run_bundle, bundle, "--profile", bad], env=env)
        expect(r.returncode == 1 and bad in r.stderr, f"tsr-run-bundle: an unwritable trace path: exit 1 ({r.returncode})")
        # NVTX: ranges for graph calls, steps and launches, balanced, under --profile and under
        # Nsight Systems (NVTX_INJECTION64_PATH set) without it; none otherwise.
        log = os.path.join(tmp, "nvtx.log")
        nvtx_env = dict(env, TSR_LIBNVTX=fake_nvtx, FAKE_NVTX_LOG=log)

        def ranges(extra_env, flags):
            if os.path.exists(log):
                os.remove(log)
            r = run([tsr, "run", PROGRAM, "--device", "cpu", *flags], env=dict(nvtx_env, **extra_env))
            lines = open(log).read().splitlines() if os.path.exists(log) else []
            return r.returncode, lines

        rc, lines = ranges({}, ["--profile", os.path.join(tmp, "n.json")])
        pushes = [l[5:] for l in lines if l.startswith("push ")]
        depth, balanced = 0, True
        for l in lines:
            depth += 1 if l.startswith("push ") else -1
            balanced = balanced and depth >= 0
        expect(rc == 0 and balanced and depth == 0 and len(pushes) > 0,
               f"--profile: NVTX ranges balance ({len(pushes)} pushes, depth at the end {depth})")
        expect(any(p.startswith("graph layer") for p in pushes) and any(p.startswith("step ") for p in pushes)
               and any("scale" in p for p in pushes), "NVTX ranges name graph calls, steps and the kernel launch")
        rc, lines = ranges({"NVTX_INJECTION64_PATH": "/nonexistent/injection.so"}, [])
        expect(rc == 0 and len(lines) == 2 * len(pushes), f"under Nsight (NVTX_INJECTION64_PATH) the same ranges without --profile ({len(lines)} lines)")
        rc, lines = ranges({}, [])
        expect(rc == 0 and lines == [], f"neither: no NVTX range ({len(lines)} lines)")
        rc, lines = ranges({"TSR_LIBNVTX": os.path.join(tmp, "missing_nvtx.so")}, ["--profile", os.path.join(tmp, "m.json")])
        expect(rc == 0 and lines == [], "no libnvToolsExt: --profile runs, silently without NVTX")
    print(f"profile_cpu: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
