#!/usr/bin/env python3
"""Data parallelism's gradient all-reduces inside the backward graph (exec/host/DataParallel.cpp,
addDataParallelMeans; docs/distributed.md "Data parallelism"), on tests/dist/dp_overlap.tsr (a
3-layer MLP's value_and_grad, 2 SGD steps).

    test_dp_overlap.py TSR FAKE_LIBCUDA FAKE_LIBNCCL [--case cpu|cuda|all] [--negative]
    test_dp_overlap.py TSR - - --gpu      # on 2 real GPUs (tools/gpu/dist.sh): the cpu case's checks
                                          # with --device cuda (NCCL), no fakes

cpu (Gloo ranks): for TSR_DP_BUCKET_MB of 25 (one bucket), 0 (one per tensor) and 0.0001 (3
buckets): 2 ranks give the single rank's losses and gradients on the global batch (to 1e-6
relative), both ranks the same bits, and the same bits as the host path after the graph call
(TSR_DP_OVERLAP=0) and as a second run with --deterministic; the graph runs as many all-reduces
(TSR_DIST_REPORT) as data parallelism made buckets (TSR_DP_REPORT).

cuda (no GPU: the fake driver and fake libnccl of tests/cuda and tests/dist, which append every
kernel launch and all-reduce to TSR_FAKE_TRACE/trace.PID): the same counts, and on each rank a
kernel launch comes after the first all-reduce and before the last one, i.e. the backward's later
steps were issued after the first bucket's all-reduce (the overlap). --negative: the same check
with TSR_DP_OVERLAP=end (the all-reduces placed after the whole backward), which must fail it.

Imports the standard library only (the .npy files are read by hand).
"""
import argparse
import os
import re
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from distlib import Checks  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "dp_overlap.tsr")
KEYS = ["loss", "g_w1", "g_b1", "g_w2", "g_b2", "g_w3"]
STEPS = 2


check = Checks()


def npy(path):
    """The raw bytes and the float32 values of a little-endian f32 .npy file."""
    raw = open(path, "rb").read()
    assert raw[:6] == b"\x93NUMPY", path
    hlen = struct.unpack("<H", raw[8:10])[0] if raw[6] == 1 else struct.unpack("<I", raw[8:12])[0]
    start = (10 if raw[6] == 1 else 12) + hlen
    header = raw[start - hlen:start].decode("latin1")
    assert "'<f4'" in header, header
    body = raw[start:]
    return body, struct.unpack(f"<{len(body) // 4}f", body)


DEVICE = []  # --gpu: ["--device", "cuda"] on every run of the cpu case


def run(tsr, out, devices, env_extra, extra=()):
    env = dict(os.environ, TSR_DIST_OUTPUT="all", TSR_DP_REPORT="1", TSR_DIST_REPORT="1", **env_extra)
    cmd = [tsr, "run", PROG, "--out", out, "--steps", str(STEPS), *extra]
    if devices > 1:
        cmd += ["--devices", str(devices)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def counts(p, label):
    """Checks that every data-parallel call reported B buckets and its graph ran B all-reduces."""
    made = [int(b) for _, b in re.findall(r"data_parallel `loss_fn`: (\d+) tensor\(s\) in (\d+) all-reduce\(s\) \(in the backward graph", p.stderr)]
    ran = [int(n) for n in re.findall(r"collectives: rank \d+: graph `eager\d+` ran (\d+)", p.stderr)]
    ok = len(made) == 2 * STEPS and made == ran[:len(made)] and len(ran) == len(made)
    check(ok, f"{label}: all-reduces run per step = buckets made ({made[:1]} on each rank and step; ran {sorted(set(ran))})")
    return made[0] if made else None


def case_cpu(tsr):
    where = "gpu (NCCL)" if DEVICE else "cpu"
    with tempfile.TemporaryDirectory() as t:
        def out(name):
            d = os.path.join(t, name)
            os.makedirs(d, exist_ok=True)
            return d
        p = run(tsr, out("one"), 1, {}, tuple(DEVICE))
        check(p.returncode == 0, f"{where}: 1 rank ran" + ("" if p.returncode == 0 else "\n" + p.stderr[-2000:]))
        for mb, want in (("25", 1), ("0", 6), ("0.0001", 3)):
            runs = {}
            for name, env_extra, extra in (("graph", {"TSR_DP_OVERLAP": "1"}, ()), ("host", {"TSR_DP_OVERLAP": "0"}, ()), ("again", {"TSR_DP_OVERLAP": "1"}, ("--deterministic",)),
                                           ("det", {}, ("--deterministic",))):
                p = run(tsr, out(f"{mb}-{name}"), 2, dict(env_extra, TSR_DP_BUCKET_MB=mb), tuple(extra) + tuple(DEVICE))
                check(p.returncode == 0, f"{where}: TSR_DP_BUCKET_MB={mb} {name}: 2 ranks ran" + ("" if p.returncode == 0 else "\n" + p.stderr[-2000:]))
                runs[name] = os.path.join(t, f"{mb}-{name}")
                if name == "graph" and p.returncode == 0:
                    check(counts(p, f"{where}: TSR_DP_BUCKET_MB={mb}") == want, f"{where}: TSR_DP_BUCKET_MB={mb}: {want} bucket(s)")
                if name == "host" and p.returncode == 0:
                    # (its buckets follow the result's order, not the backward's: their number may differ)
                    check("(in the backward graph" not in p.stderr and re.search(r"data_parallel `loss_fn`: 6 tensor\(s\) in \d+ all-reduce\(s\)\n", p.stderr),
                          f"{where}: TSR_DP_BUCKET_MB={mb}: TSR_DP_OVERLAP=0 averages on the host path")
            worst = 0.0
            same_ranks = same_host = same_det = True
            for s in range(STEPS):
                for k in KEYS:
                    try:
                        _, one = npy(os.path.join(t, "one", f"r0_s{s}_{k}.npy"))
                        r0, two = npy(os.path.join(runs["graph"], f"r0_s{s}_{k}.npy"))
                        r1, _ = npy(os.path.join(runs["graph"], f"r1_s{s}_{k}.npy"))
                        h0, _ = npy(os.path.join(runs["host"], f"r0_s{s}_{k}.npy"))
                        d0, _ = npy(os.path.join(runs["det"], f"r0_s{s}_{k}.npy"))
                        a0, _ = npy(os.path.join(runs["again"], f"r0_s{s}_{k}.npy"))
                    except (OSError, AssertionError) as e:
                        check(False, f"{where}: TSR_DP_BUCKET_MB={mb}: read step {s} {k}: {e}")
                        continue
                    scale = max(1e-6, max(abs(v) for v in one))
                    worst = max(worst, max(abs(a - b) for a, b in zip(one, two)) / scale)
                    same_ranks &= r0 == r1
                    same_host &= r0 == h0
                    same_det &= d0 == a0 and d0 == r0
            check(worst <= 1e-6, f"{where}: TSR_DP_BUCKET_MB={mb}: 2 ranks = 1 rank on the global batch (worst relative difference {worst:.2e})")
            check(same_ranks, f"{where}: TSR_DP_BUCKET_MB={mb}: both ranks the same bits")
            check(same_host, f"{where}: TSR_DP_BUCKET_MB={mb}: in the graph = the host path (same bits)")
            check(same_det, f"{where}: TSR_DP_BUCKET_MB={mb}: --deterministic twice = the same bits (and = without it)")


def case_cuda(tsr, libcuda, libnccl, negative):
    for mb, want in (("0", 6), ("0.0001", 3)):
        with tempfile.TemporaryDirectory() as t:
            trace = os.path.join(t, "trace")
            os.mkdir(trace)
            env_extra = {"TSR_LIBCUDA": libcuda, "TSR_LIBNCCL": libnccl, "TSR_FAKE_TRACE": trace, "TSR_DP_BUCKET_MB": mb,
                         "TSR_DP_OVERLAP": "1"}
            if negative:
                env_extra["TSR_DP_OVERLAP"] = "end"
            p = run(tsr, t, 2, env_extra, ("--device", "cuda"))
            label = f"cuda (fake driver and NCCL), TSR_DP_BUCKET_MB={mb}"
            check(p.returncode == 0, f"{label}: 2 ranks ran" + ("" if p.returncode == 0 else "\n" + p.stderr[-2000:]))
            if p.returncode != 0:
                continue
            check(counts(p, label) == want, f"{label}: {want} bucket(s)")
            files = sorted(os.listdir(trace))
            check(len(files) == 2, f"{label}: a trace per rank ({len(files)})")
            for f in files:
                events = open(os.path.join(trace, f)).read().splitlines()
                ars = [i for i, e in enumerate(events) if e.startswith("all_reduce")]
                # The first step's all-reduces (the program has no other collective).
                first = ars[:want]
                between = sum(1 for e in events[first[0] + 1:first[-1]] if e == "launch") if len(first) == want else 0
                check(len(ars) == want * STEPS and between > 0,
                      f"{label}: {f}: {between} kernel launch(es) of the backward issued after the step's first all-reduce and before its last "
                      f"({len(ars)} all-reduces, {events.count('launch')} launches)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsr")
    ap.add_argument("libcuda")
    ap.add_argument("libnccl")
    ap.add_argument("--case", default="all", choices=["all", "cpu", "cuda"])
    ap.add_argument("--negative", action="store_true")
    ap.add_argument("--gpu", action="store_true")
    a = ap.parse_args()
    if a.gpu:
        DEVICE.extend(["--device", "cuda"])
        a.case = "cpu"
    if a.case in ("all", "cpu") and not a.negative:
        case_cpu(a.tsr)
    if a.case in ("all", "cuda"):
        case_cuda(a.tsr, a.libcuda, a.libnccl, a.negative)
    print(f"{check.passed} passed, {check.failed} failed")
    return 1 if check.failed or check.passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
