"""Distributed runs on the CPU (docs/distributed.md): `tsr run --devices 2` over Gloo.

  test_dist.py TSR ROOT [--case NAME] [--negative]

Cases:
- collectives: tests/dist/collectives.tsr on 2 ranks, every collective (graph and host code) and
  the gradients through all_reduce, all_gather, all_to_all and broadcast, against NumPy's values
  on the same inputs (exact: every value is a small integer in f32), on the compiled executor
  and on the reference evaluator.
- killed: a rank killed (SIGKILL) mid-run ends the others within 20 s, with a message naming it.
- failed: a rank that stops with an error ends the other, naming it and its exit code.
- outer: two ranks started by hand (RANK, WORLD_SIZE, ... set, as torchrun does); one killed, the
  other fails within TSR_DIST_TIMEOUT_S and names the collective: no hang without our launcher.
- bad: a mesh of the wrong size, an axis the mesh lacks, a reduce_scatter that does not divide.
--negative: the collectives case with one expectation deliberately wrong; it must then fail.
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from distlib import Checks, launch_env  # noqa: E402
import testlib  # noqa: E402
from torch_python import reexec_with_torch  # noqa: E402

reexec_with_torch("dist_cpu")  # NumPy is the oracle (the configured Python may lack it)
import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TSR = None
EXTRA = []  # --device cuda (tools/gpu/dist.sh): after the file, on every run


def T(*args):
    """`tsr run ARGS` with the extra flags (--device)."""
    return [TSR, "run", *args, *EXTRA]


check = Checks()


def env(**extra):
    return launch_env(**extra)


def expected(negative):
    base = np.arange(8, dtype=np.float32).reshape(2, 4)
    xs = [base * (r + 1) + 10 * r for r in range(2)]
    exp = {}
    for r in range(2):
        e = {}
        e["sum"] = xs[0] + xs[1]
        e["mean"] = (xs[0] + xs[1]) / 2
        e["max"] = np.maximum(xs[0], xs[1])
        e["min"] = np.minimum(xs[0], xs[1])
        e["gather0"] = np.concatenate(xs, axis=0)
        e["gather1"] = np.concatenate(xs, axis=1)
        e["scatter1"] = np.split(xs[0] + xs[1], 2, axis=1)[r]
        e["bcast"] = xs[1]
        # all_to_all(split_dim=1, concat_dim=0): part r of each rank's columns, stacked by rank.
        e["a2a"] = np.concatenate([np.split(xs[j], 2, axis=1)[r] for j in range(2)], axis=0)
        e["host_sum"] = xs[0] + xs[1]
        e["host_gather"] = np.concatenate(xs, axis=0)
        # d/dx_r of sum_i c_i * sum((x_0^2 + x_1^2)) = 2 x_r (c_0 + c_1), c_i = i + 1.
        e["grad_reduce"] = 2 * xs[r] * 3
        # all_to_all(split_dim=1, concat_dim=0) sends x_r's columns 2p:2p+2 to rank p's rows
        # 2r:2r+2, where rank p's w_p = arange(8).reshape(4, 2) * (p + 1) weighs them.
        wa = [np.arange(8, dtype=np.float32).reshape(4, 2) * (p + 1) for p in range(2)]
        e["grad_a2a"] = np.concatenate([wa[p][2 * r:2 * r + 2] for p in range(2)], axis=1)
        e["grad_gather"] = sum((np.arange(16, dtype=np.float32).reshape(4, 4) - i)[2 * r:2 * r + 2] for i in range(2))
        w3 = [base + i for i in range(2)]
        e["grad_bcast"] = (w3[0] + w3[1]) if r == 1 else np.zeros_like(base)
        exp[r] = e
    if negative:
        exp[1]["sum"] = exp[1]["sum"] + 1  # deliberately wrong
    return exp, xs


def case_collectives(tsr, negative):
    exp, xs = expected(negative)
    for executor in ("compiled", "reference") if not EXTRA else ("compiled",):  # the evaluator runs on the CPU only
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run(T("--devices", "2", os.path.join(HERE, "collectives.tsr"), "--executor", executor, "--out", d),
                               env=env(TSR_DIST_OUTPUT="all"), capture_output=True, text=True, timeout=300)
            out = p.stdout + p.stderr
            check(p.returncode == 0 and "rank 0 of 2: done" in out and "rank 1 of 2: done" in out,
                  f"collectives ({executor}): both ranks ran (rc {p.returncode})" + ("" if p.returncode == 0 else "\n" + out))
            if p.returncode != 0:
                continue
            for r in range(2):
                for name, want in exp[r].items():
                    path = os.path.join(d, f"r{r}_{name}.npy")
                    if not os.path.exists(path):
                        check(False, f"collectives ({executor}): rank {r} wrote no {name}")
                        continue
                    got = np.load(path)
                    ok = got.shape == want.shape and np.array_equal(got, want)
                    check(ok, f"collectives ({executor}): rank {r} {name}" + ("" if ok else f"\n got {got.tolist()}\nwant {want.tolist()}"))


def case_data_parallel(tsr, negative):
    rows = 8
    x = (np.arange(rows * 3, dtype=np.float64).reshape(rows, 3) / 10).astype(np.float32).astype(np.float64)
    y = (np.arange(rows * 2, dtype=np.float64).reshape(rows, 2) / 7).astype(np.float32).astype(np.float64)
    w = (np.arange(6, dtype=np.float64).reshape(3, 2) / 5 - 0.5).astype(np.float32).astype(np.float64)
    d = x @ w - y
    loss = np.mean(d * d)
    grad = 2 * x.T @ d / d.size
    if negative:
        grad = grad * 1.01  # deliberately wrong
    for devices, seen in ((2, 12.0), (1, 24.0)):
        with tempfile.TemporaryDirectory() as t:
            cmd = T(os.path.join(HERE, "data_parallel.tsr"), "--out", t) + (["--devices", "2"] if devices > 1 else [])
            p = subprocess.run(cmd, env=env(TSR_DIST_OUTPUT="all"), capture_output=True, text=True, timeout=300)
            check(p.returncode == 0, f"data_parallel ({devices} rank(s)): ran (rc {p.returncode})" + ("" if p.returncode == 0 else "\n" + p.stdout + p.stderr))
            if p.returncode != 0:
                continue
            for r in range(devices):
                got_loss = float(np.load(os.path.join(t, f"r{r}_dp_loss.npy")))
                got_grad = np.load(os.path.join(t, f"r{r}_dp_grad.npy")).astype(np.float64)
                got_seen = float(np.load(os.path.join(t, f"r{r}_dp_seen.npy")))
                check(abs(got_loss - loss) <= 1e-5 * abs(loss), f"data_parallel ({devices}): rank {r} loss {got_loss:.7f} = the global batch's {loss:.7f}")
                ok = np.allclose(got_grad, grad, rtol=1e-5, atol=1e-7)
                check(ok, f"data_parallel ({devices}): rank {r} gradient = the global batch's" + ("" if ok else f"\n got {got_grad.tolist()}\nwant {grad.tolist()}"))
                check(got_seen == seen, f"data_parallel ({devices}): rank {r} saw {got_seen:g} elements of x (want {seen:g}: the batch is cut among the ranks)")
    p = subprocess.run(T(os.path.join(HERE, "data_parallel.tsr"), "--devices", "2", "--rows", "7"), env=env(), capture_output=True, text=True, timeout=300)
    check(p.returncode == 1 and "data_parallel `loss_fn`: the batch argument `x` has 7 rows (shape (7, 3)), which do not divide among the 2 ranks of mesh axis dp" in p.stderr,
          "data_parallel: a batch of 7 rows on 2 ranks:\n" + p.stderr.strip())


def case_buckets(tsr, negative):
    """Data parallelism's gradient buckets (exec/host/DataParallel.cpp): the loss and gradient of
    data_parallel.tsr averaged in one all-reduce (the default 25 MiB bucket) are the same bits as
    with one all-reduce per tensor (TSR_DP_BUCKET_MB=0), on both ranks. --negative: the per-tensor
    run gets 6 rows instead of 8, so the comparison must fail."""
    got = {}
    with tempfile.TemporaryDirectory() as t:
        for mb, want in (("25", "2 tensor(s) in 1 all-reduce(s)"), ("0", "2 tensor(s) in 2 all-reduce(s)")):
            d = os.path.join(t, mb)
            os.mkdir(d)
            rows = "6" if negative and mb == "0" else "8"
            p = subprocess.run(T(os.path.join(HERE, "data_parallel.tsr"), "--devices", "2", "--out", d, "--rows", rows),
                               env=env(TSR_DP_BUCKET_MB=mb, TSR_DP_REPORT="1"), capture_output=True, text=True, timeout=300)
            check(p.returncode == 0 and f"data_parallel `loss_fn`: {want}" in p.stderr,
                  f"buckets: TSR_DP_BUCKET_MB={mb} averages {want}" + ("" if p.returncode == 0 else "\n" + p.stderr))
            for r in range(2):
                for f in ("loss", "grad"):
                    path = os.path.join(d, f"r{r}_dp_{f}.npy")
                    got[(mb, r, f)] = open(path, "rb").read() if os.path.exists(path) else None
    for r in range(2):
        for f in ("loss", "grad"):
            a, b = got.get(("25", r, f)), got.get(("0", r, f))
            check(a is not None and a == b, f"buckets: rank {r} {f} bucketed = per tensor (same bits)")


def case_deterministic(tsr):
    """Two 2-rank runs of data_parallel.tsr: the averaged gradients are the same bits in both runs
    and on both ranks (Gloo sums in a fixed order)."""
    files = []
    with tempfile.TemporaryDirectory() as t:
        for run in range(2):
            d = os.path.join(t, str(run))
            os.mkdir(d)
            p = subprocess.run(T(os.path.join(HERE, "data_parallel.tsr"), "--devices", "2", "--out", d), env=env(), capture_output=True, text=True, timeout=300)
            check(p.returncode == 0, f"deterministic: run {run} (rc {p.returncode})")
            for r in range(2):
                path = os.path.join(d, f"r{r}_dp_grad.npy")
                files.append(open(path, "rb").read() if os.path.exists(path) else None)
    check(files[0] is not None and all(f == files[0] for f in files), "deterministic: the gradients are bit-identical across 2 runs and 2 ranks")


def case_digits(tsr, root):
    """examples/digits_vit.tsr for 3 epochs alone and with --devices 2: the losses per epoch and the
    test accuracy agree (the two runs differ only in summation order)."""
    import re
    res = {}
    for devices in (1, 2):
        with tempfile.TemporaryDirectory() as t:
            cmd = T(os.path.join(root, "examples", "digits_vit.tsr"), "--epochs", "3", "--out", os.path.join(t, "c.svg"),
                   "--data", os.path.join(root, "examples", "data", "digits.csv.gz"), "--devices", str(devices))
            p = subprocess.run(cmd, env=env(TSR_DEVICE="cpu"), capture_output=True, text=True, timeout=600)
            check(p.returncode == 0, f"digits_vit --devices {devices}: ran (rc {p.returncode})" + ("" if p.returncode == 0 else "\n" + p.stderr[-2000:]))
            losses = [float(m) for m in re.findall(r"epoch +\d+/3  loss ([0-9.]+)", p.stdout)]
            acc = re.findall(r"final test accuracy ([0-9.]+)%", p.stdout)
            res[devices] = (losses, float(acc[0]) if acc else None)
    (l1, a1), (l2, a2) = res[1], res[2]
    print(f"digits_vit: 1 rank: losses {l1}, test accuracy {a1}%; 2 ranks: losses {l2}, test accuracy {a2}%")
    check(len(l1) == 3 and len(l2) == 3 and all(abs(x - y) <= 2e-3 * max(1.0, abs(x)) for x, y in zip(l1, l2)),
          "digits_vit: the epochs' losses on 2 ranks are the single device's")
    check(a1 is not None and a2 is not None and abs(a1 - a2) <= 1.0, "digits_vit: the test accuracy on 2 ranks is the single device's (within 1 point)")


def find_rank_pid(launcher_pid, rank):
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != launcher_pid:
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                if f"RANK={rank}".encode() in f.read().split(b"\0"):
                    return int(name)
        except (OSError, ValueError, IndexError):
            continue
    return None


def case_killed(tsr):
    p = subprocess.Popen(T("--devices", "2", os.path.join(HERE, "die.tsr")), env=env(TSR_DIST_OUTPUT="all"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Wait until both ranks run their loop.
    started = time.time()
    lines = []
    while time.time() - started < 120:
        line = p.stdout.readline()
        if not line:
            break
        lines.append(line)
        if sum("running" in l for l in lines) == 2:
            break
    victim = find_rank_pid(p.pid, 1)
    check(victim is not None, "killed: found rank 1's process")
    if victim is None:
        p.kill()
        return
    os.kill(victim, signal.SIGKILL)
    t0 = time.time()
    try:
        _, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        check(False, "killed: the launcher ended within 20 s of rank 1's death")
        return
    took = time.time() - t0
    check(True, f"killed: the launcher ended {took:.1f} s after rank 1's death")
    check(p.returncode == 128 + 9, f"killed: exit code 137 (got {p.returncode})")
    check(f"rank 1 of 2 (pid {victim}) was killed by signal 9" in err, "killed: the message names rank 1 and its signal:\n" + err.strip())


def case_failed(tsr):
    t0 = time.time()
    p = subprocess.run(T("--devices", "2", os.path.join(HERE, "die.tsr"), "--fail_rank", "1", "--fail_after", "3"),
                       env=env(), capture_output=True, text=True, timeout=120)
    check(p.returncode == 1, f"failed: exit code 1 (got {p.returncode})")
    check("rank 1 stops on purpose at step 3" in p.stderr and "rank 1 of 2" in p.stderr and "exited with code 1" in p.stderr,
          "failed: the rank's error and the launcher's message naming it:\n" + p.stderr.strip())
    check(time.time() - t0 < 60, f"failed: ended in {time.time() - t0:.1f} s")


def case_outer(tsr):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    procs = []
    for r in range(2):
        e = env(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TSR_DIST_TIMEOUT_S="5")
        procs.append(subprocess.Popen(T("--devices", "2", os.path.join(HERE, "die.tsr")), env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for pr in procs:
        pr.stdout.readline()  # "rank r running"
    procs[1].send_signal(signal.SIGKILL)
    procs[1].wait()
    t0 = time.time()
    try:
        _, err = procs[0].communicate(timeout=30)
    except subprocess.TimeoutExpired:
        procs[0].kill()
        check(False, "outer: rank 0 ended within 30 s of its peer's death (it hangs)")
        return
    check(procs[0].returncode == 1, f"outer: rank 0 exits 1 (got {procs[0].returncode}) after {time.time() - t0:.1f} s")
    check("all_reduce over mesh axis dp" in err and "failed on rank 0" in err,
          "outer: rank 0's error names the collective and the rank:\n" + err.strip())


def case_bad(tsr):
    p = subprocess.run(T("--devices", "2", os.path.join(HERE, "bad_mesh.tsr")), env=env(), capture_output=True, text=True, timeout=120)
    check(p.returncode == 1 and "has 4 devices, but the run has 2" in p.stderr, "bad: a mesh of 4 on 2 ranks:\n" + p.stderr.strip())
    p = subprocess.run(T(os.path.join(HERE, "bad_mesh.tsr")), env=env(), capture_output=True, text=True, timeout=120)
    check(p.returncode == 1 and "has 4 devices, but the run has 1 (run it with `tsr run --devices 4`)" in p.stderr,
          "bad: a mesh of 4 on one process:\n" + p.stderr.strip())
    p = subprocess.run(T("--devices", "2", os.path.join(HERE, "bad_axis.tsr")), env=env(), capture_output=True, text=True, timeout=120)
    check(p.returncode == 1 and "error[E0701]: `dist.all_reduce` over mesh axis \"tp\", which the mesh (\"dp\",) lacks" in p.stderr,
          "bad: an axis the mesh lacks (the checker's E0701):\n" + p.stderr.strip())
    p = subprocess.run(T("--devices", "2", os.path.join(HERE, "bad_axis_host.tsr"), "--axis", "tp"), env=env(), capture_output=True, text=True, timeout=120)
    check(p.returncode == 1 and "error[E0701]: `dist.all_reduce` over mesh axis \"tp\", which the mesh (\"dp\",) lacks" in p.stderr, "bad: an axis the mesh lacks, known only at run time:\n" + p.stderr.strip())
    p = subprocess.run(T("--devices", "2", os.path.join(HERE, "bad_scatter.tsr")), env=env(), capture_output=True, text=True, timeout=120)
    check(p.returncode == 1 and "does not divide among the group's 2 ranks" in p.stderr and "(3)" in p.stderr,
          "bad: reduce_scatter of 3 rows on 2 ranks:\n" + p.stderr.strip())
    p = subprocess.run(T("--devices", "0", os.path.join(HERE, "bad_mesh.tsr")), env=env(), capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and "expected a positive number of ranks" in p.stderr, "bad: --devices 0")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsr")
    ap.add_argument("root")
    ap.add_argument("--case", default="all")
    ap.add_argument("--negative", action="store_true")
    ap.add_argument("--device", default=None, help="tsr run's --device for every run (cuda: tools/gpu/dist.sh)")
    a = ap.parse_args()
    global TSR
    TSR = a.tsr
    if a.device:
        EXTRA.extend(["--device", a.device])
    cases = {"collectives": lambda: case_collectives(a.tsr, a.negative), "data_parallel": lambda: case_data_parallel(a.tsr, a.negative),
             "buckets": lambda: case_buckets(a.tsr, a.negative),
             "killed": lambda: case_killed(a.tsr),
             "deterministic": lambda: case_deterministic(a.tsr), "digits": lambda: case_digits(a.tsr, a.root), "failed": lambda: case_failed(a.tsr), "outer": lambda: case_outer(a.tsr), "bad": lambda: case_bad(a.tsr)}
    for name, fn in cases.items():
        if a.case in ("all", name):
            fn()
    sys.exit(testlib.summary(check.passed, check.failed, minimum=5 if a.case == "all" else 1))


if __name__ == "__main__":
    main()
