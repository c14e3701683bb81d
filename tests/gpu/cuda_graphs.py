#!/usr/bin/env python3
"""CUDA-graph replay on a GPU (exec/GraphReplay.h; tools/gpu/suite.sh's step cuda_graphs):
tests/gpu/cuda_graphs_decode.tsr decodes with examples/gpt/generate.tsr's cached_step, one graph
call per token, without graphs (TSR_CUDA_GRAPHS=0) and with them (TSR_CUDA_GRAPHS=1), at batch 1
and 8. Each comparison is a line PASS/FAIL:

  - captured: with graphs, cached_step is captured (TSR_CUDA_GRAPHS_VERBOSE's line
    `cuda graphs: @cached_step... captured: N kernels`);
  - tokens: the tokens with graphs equal those without;
  - negative control: with the static inputs' copies skipped (TSR_TEST_GRAPHS_BREAK=copy-in) the
    tokens differ (else the comparison could not see a stale input);
  - steady: TSR_CUDA_GRAPHS_VERBOSE's report: from the 3rd replay on, the caches, window and
    scores (8 inputs at 2 layers) read in place, at most 3 inputs copied in, 1 output copied out,
    0 host waits between replays; negative control: with TSR_TEST_GRAPHS_BREAK=feedback none is
    read in place;
  - error: positions run past the context (--overrun): the gather's error inside a replay, read
    lazily, has the exit code and the source line of the run without graphs;
  - profile: under --profile nothing is captured.

Prints both rates (tokens/s after the 4th token), and ends with `N passed, N failed`.

    cuda_graphs.py TSR [--tokens N]
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def run(tsr, env_extra, batch, tokens, extra=()):
    env = dict(os.environ)
    env.pop("TSR_CUDA_GRAPHS", None)
    env.pop("TSR_TEST_GRAPHS_BREAK", None)
    env["TESSERA_PATH"] = os.path.join(ROOT, "examples", "gpt")
    env.update(env_extra)
    cmd = [tsr, "run", os.path.join(ROOT, "tests", "gpu", "cuda_graphs_decode.tsr"), "--device", "cuda",
           "--tokens", str(tokens), "--batch", str(batch), *extra]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    rows = [l for l in p.stdout.splitlines() if l.startswith("row ")]
    rate = re.search(r"decode: (\d+) tokens/s", p.stdout)
    return p, rows, int(rate.group(1)) if rate else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsr")
    ap.add_argument("--tokens", type=int, default=96)
    a = ap.parse_args()
    passed = failed = 0

    def report(ok, what, detail=""):
        nonlocal passed, failed
        passed += ok
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} {what}" + (f": {detail}" if detail else ""), flush=True)

    for batch in (1, 8):
        plain, rows0, rate0 = run(a.tsr, {"TSR_CUDA_GRAPHS": "0"}, batch, a.tokens)
        if batch == 1 and plain.returncode != 0 and "no GPU" in plain.stderr + plain.stdout:
            why = next((l for l in (plain.stderr + plain.stdout).splitlines() if "GPU" in l), "no GPU")
            print(f"SKIP cuda_graphs: no GPU ({why.strip()})")
            return 77
        if plain.returncode != 0 or len(rows0) != batch:
            report(False, f"batch {batch}: the run without graphs", f"exit {plain.returncode}: {plain.stderr.strip()[-600:]}")
            continue
        graphs, rows1, rate1 = run(a.tsr, {"TSR_CUDA_GRAPHS": "1", "TSR_CUDA_GRAPHS_VERBOSE": "1"}, batch, a.tokens)
        if graphs.returncode != 0:
            report(False, f"batch {batch}: the run with graphs", f"exit {graphs.returncode}: {graphs.stderr.strip()[-600:]}")
            continue
        captured = re.search(r"cuda graphs: @cached_step\S* captured: (\d+) kernels.*", graphs.stderr)
        notes = [l for l in graphs.stderr.splitlines() if "cached_step" in l or "CUDA graphs are off" in l]
        report(bool(captured), f"batch {batch}: cached_step captured", captured.group(0) if captured else " | ".join(notes) or "no line")
        same = rows1 == rows0
        first = next((i for i, (x, y) in enumerate(zip(rows0, rows1)) if x != y), None)
        report(same, f"batch {batch}: the tokens with graphs equal those without",
               "" if same else f"row {first} differs:\n  without: {rows0[first][:200]}\n  with:    {rows1[first][:200]}")
        print(f"     rate at batch {batch}: {rate0} tokens/s without graphs, {rate1} with", flush=True)
        steady = re.search(r"cuda graphs: \d+ replays; from the 3rd on, per replay ([\d.]+) inputs copied in, ([\d.]+) fed back in place, "
                           r"([\d.]+) outputs copied out, ([\d.]+) host waits between replays.*", graphs.stderr)
        ok = bool(steady) and float(steady.group(1)) <= 3 and float(steady.group(2)) == 8 and float(steady.group(3)) == 1 \
            and float(steady.group(4)) == 0
        report(ok, f"batch {batch}: steady replays copy only the new inputs and do not wait", steady.group(0) if steady else "no report")
        nofeed, rows4, _ = run(a.tsr, {"TSR_CUDA_GRAPHS": "1", "TSR_CUDA_GRAPHS_VERBOSE": "1", "TSR_TEST_GRAPHS_BREAK": "feedback"},
                               batch, a.tokens)
        report(nofeed.returncode == 0 and rows4 == rows0 and ", 0 fed back in place" in nofeed.stderr,
               f"batch {batch}: negative control (feedback off) reads nothing in place, same tokens",
               f"exit {nofeed.returncode}" if nofeed.returncode else "")
        broken, rows2, _ = run(a.tsr, {"TSR_CUDA_GRAPHS": "1", "TSR_TEST_GRAPHS_BREAK": "copy-in"}, batch, a.tokens)
        report(broken.returncode == 0 and rows2 != rows0,
               f"batch {batch}: negative control (the static inputs' copies skipped) gives other tokens",
               f"exit {broken.returncode}" if broken.returncode else ("the same tokens" if rows2 == rows0 else ""))

    # An error inside a replay (positions past the context: the position embedding's gather).
    over = ("--overrun", "true", "--context", "32")
    e0, _, _ = run(a.tsr, {"TSR_CUDA_GRAPHS": "0"}, 1, 40, over)
    e1, _, _ = run(a.tsr, {"TSR_CUDA_GRAPHS": "1", "TSR_CUDA_GRAPHS_VERBOSE": "1"}, 1, 40, over)
    where0 = re.search(r"(\S+\.tsr:\d+):\d+: error", e0.stderr)
    where1 = re.search(r"(\S+\.tsr:\d+):\d+: error", e1.stderr)
    report(e0.returncode == 1 and e1.returncode == 1 and where0 and where1 and where0.group(1) == where1.group(1)
           and "replayed" in e1.stderr,
           "an error inside a replay: the exit code and line of the run without graphs",
           f"without graphs exit {e0.returncode} {where0.group(0) if where0 else e0.stderr.strip()[-300:]}; "
           f"with exit {e1.returncode} {where1.group(0) if where1 else e1.stderr.strip()[-300:]}")

    prof_path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "cuda_graphs_profile.json")
    prof, rows3, _ = run(a.tsr, {"TSR_CUDA_GRAPHS": "1", "TSR_CUDA_GRAPHS_VERBOSE": "1"}, 1, 16, ("--profile", prof_path))
    report(prof.returncode == 0 and "captured" not in prof.stderr, "under --profile nothing is captured",
           f"exit {prof.returncode}" if prof.returncode else "")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
