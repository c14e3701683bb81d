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
import testlib  # noqa: E402
from torch_python import reexec_with_torch  # noqa: E402

reexec_with_torch("dist_cpu")  # NumPy is the oracle (the configured Python may lack it)
import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
        print(f"PASS {what}")
    else:
        failed += 1
        print(f"FAIL {what}")
    sys.stdout.flush()


def env(**extra):
    e = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(k, None)
    e["TSR_DIST_TIMEOUT_S"] = "60"
    e.update(extra)
    return e


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
    for executor in ("compiled", "reference"):
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run([tsr, "run", "--devices", "2", os.path.join(HERE, "collectives.tsr"), "--executor", executor, "--out", d],
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
    p = subprocess.Popen([tsr, "run", "--devices", "2", os.path.join(HERE, "die.tsr")], env=env(TSR_DIST_OUTPUT="all"),
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
    p = subprocess.run([tsr, "run", "--devices", "2", os.path.join(HERE, "die.tsr"), "--fail_rank", "1", "--fail_after", "3"],
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
        procs.append(subprocess.Popen([tsr, "run", "--devices", "2", os.path.join(HERE, "die.tsr")], env=e,
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
    p = subprocess.run([tsr, "run", "--devices", "2", os.path.join(HERE, "bad_mesh.tsr")], env=env(), capture_output=True, text=True, timeout=120)
    check(p.returncode == 1 and "has 4 devices, but the run has 2" in p.stderr, "bad: a mesh of 4 on 2 ranks:\n" + p.stderr.strip())
    p = subprocess.run([tsr, "run", os.path.join(HERE, "bad_mesh.tsr")], env=env(), capture_output=True, text=True, timeout=120)
    check(p.returncode == 1 and "has 4 devices, but the run has 1 (run it with `tsr run --devices 4`)" in p.stderr,
          "bad: a mesh of 4 on one process:\n" + p.stderr.strip())
    p = subprocess.run([tsr, "run", "--devices", "2", os.path.join(HERE, "bad_axis.tsr")], env=env(), capture_output=True, text=True, timeout=120)
    check(p.returncode == 1 and "error[E0701]: `dist.all_reduce` over mesh axis \"tp\", which the mesh (\"dp\",) lacks" in p.stderr,
          "bad: an axis the mesh lacks (the checker's E0701):\n" + p.stderr.strip())
    p = subprocess.run([tsr, "run", "--devices", "2", os.path.join(HERE, "bad_axis_host.tsr"), "--axis", "tp"], env=env(), capture_output=True, text=True, timeout=120)
    check(p.returncode == 1 and "error[E0701]: `dist.all_reduce` over mesh axis \"tp\", which the mesh (\"dp\",) lacks" in p.stderr, "bad: an axis the mesh lacks, known only at run time:\n" + p.stderr.strip())
    p = subprocess.run([tsr, "run", "--devices", "2", os.path.join(HERE, "bad_scatter.tsr")], env=env(), capture_output=True, text=True, timeout=120)
    check(p.returncode == 1 and "does not divide among the group's 2 ranks" in p.stderr and "(3)" in p.stderr,
          "bad: reduce_scatter of 3 rows on 2 ranks:\n" + p.stderr.strip())
    p = subprocess.run([tsr, "run", "--devices", "0", os.path.join(HERE, "bad_mesh.tsr")], env=env(), capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and "expected a positive number of ranks" in p.stderr, "bad: --devices 0")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsr")
    ap.add_argument("root")
    ap.add_argument("--case", default="all")
    ap.add_argument("--negative", action="store_true")
    a = ap.parse_args()
    cases = {"collectives": lambda: case_collectives(a.tsr, a.negative), "killed": lambda: case_killed(a.tsr),
             "failed": lambda: case_failed(a.tsr), "outer": lambda: case_outer(a.tsr), "bad": lambda: case_bad(a.tsr)}
    for name, fn in cases.items():
        if a.case in ("all", name):
            fn()
    sys.exit(testlib.summary(passed, failed, minimum=5 if a.case == "all" else 1))


if __name__ == "__main__":
    main()
