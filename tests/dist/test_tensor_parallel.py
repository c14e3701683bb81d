"""Tensor parallelism on the CPU (docs/distributed.md "Tensor parallelism"): Megatron-LM's MLP
(examples/tensor_parallel_mlp.tsr) on Gloo ranks against one rank's run of the unsharded model.

  test_tensor_parallel.py TSR ROOT [--case NAME] [--negative]

Cases:
- mlp: the example on 1 rank (the reference: every shard is the whole) and on 2 and 4 ranks. The
  output, the loss, X's gradient and the output bias's gradient (replicated) equal the
  reference's on every rank, and the shards of A's, its bias's and B's gradients, joined in rank
  order, equal the reference's gradients (tolerance of summation order: 1e-5 relative, 1e-6
  absolute); each rank's A shard has hidden/n columns. TSR_DIST_REPORT=1 counts the collectives
  each graph call ran: the forward call 1 all-reduce, value_and_grad (forward and backward) 2,
  so the backward pass 1; for the parameters alone (the SGD steps) 1, the forward pass's. Ten
  SGD steps end at the reference's loss.
- rules: tests/dist/tp_rules.tsr on 2 and 4 ranks against 1: X used by two column-parallel
  products (its cotangent still one all-reduce: the call runs 2), all_reduce with op="mean" and
  "max", and a graph function that differentiates and takes SGD steps inside (3 steps: the
  updated shards and the loss; 1 all-reduce per step, X not being differentiated).
- dp_tp: tests/dist/tp_dp.tsr on a dp x tp mesh of 2 x 2 (4 ranks): the loss and the gradients
  (averaged over dp, sharded over tp) equal the reference's.
- bad: a shard that does not divide (the checker's error where the mesh is a literal, the run's
  otherwise, each naming the tensor, the axis and the sizes), an axis the mesh lacks (E0701, from
  the checker and from the run), a mesh that does not match --devices, the checker's shard type.
--negative: the mlp case's comparisons on tests/dist/tp_plain.tsr, whose shards are sliced by
  hand instead of by dist.tensor: its gradients (the replicated loss counted once per rank, X's
  cotangent partial) must fail them, and its value_and_grad for the parameters alone runs 2
  all-reduces (all_reduce transposed to all_reduce), which must fail the count.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from distlib import Checks, launch_env  # noqa: E402
import testlib  # noqa: E402,F401
from torch_python import reexec_with_torch  # noqa: E402

reexec_with_torch("dist_tensor_parallel")  # NumPy is the oracle (the configured Python may lack it)
import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TSR = TSRC = ROOT = None
EXTRA = []  # --device cuda (tools/gpu/dist.sh): after the file, on every run
MAX = [4]  # --max-devices: the most ranks a run may have (GPUs on a GPU host)

# name -> the axis along which the ranks' shards join (None: replicated, the same on every rank)
GRADS = {"y": None, "loss": None, "gx": None, "gb2": None, "ga": 1, "gb1": 0, "gb": 0}


check = Checks()


def env(**extra):
    return launch_env(drop=("TSR_DIST_REPORT",), **extra)


def run(devices, prog, *args, **envs):
    cmd = [TSR, "run", "--devices", str(devices), prog, *args, *EXTRA]
    return subprocess.run(cmd, capture_output=True, text=True, env=env(**envs), timeout=600)


def load(d, r, name):
    return np.load(os.path.join(d, f"r{r}_{name}.npy"))


def close(a, b):
    return a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-6)


def compare(label, ref, got, n, names):
    """Every rank's replicated values, and the shards joined, against the reference's."""
    for name in names:
        want = load(ref, 0, name)
        axis = GRADS[name]
        if axis is None:
            for r in range(n):
                x = load(got, r, name)
                check(close(x, want), f"{label}: rank {r} {name} (max diff {np.abs(x - want).max() if x.shape == want.shape else x.shape})")
        else:
            joined = np.concatenate([load(got, r, name) for r in range(n)], axis=axis)
            diff = np.abs(joined - want).max() if joined.shape == want.shape else joined.shape
            check(close(joined, want), f"{label}: {name} shards joined (max diff {diff})")


def reference(tmp):
    ref = os.path.join(tmp, "ref")
    os.makedirs(ref)
    p = run(1, EXAMPLE, "--out", ref, "--steps", "10")
    check(p.returncode == 0, "reference: one rank runs\n" + p.stderr[-2000:])
    return ref, p.stdout


def final_loss(stdout):
    m = re.findall(r"step 10: loss ([0-9.]+)", stdout)
    return float(m[-1]) if m else None


def params_only(label, calls):
    """value_and_grad of the loss for the parameters alone (X not differentiated) runs only the
    forward pass's all-reduce: g's transpose is the identity."""
    check(bool(calls) and all(c == 1 for c in calls), f"{label}: value_and_grad for the parameters alone ran {calls} all-reduce(s), 1 each expected")


def case_mlp(tmp, negative):
    ref, ref_out = reference(tmp)
    for n in (2, 4):
        if n > MAX[0]:
            print(f"SKIP mlp ({n}): {MAX[0]} device(s)")
            continue
        got = os.path.join(tmp, f"tp{n}")
        os.makedirs(got)
        if negative:
            p = run(n, os.path.join(HERE, "tp_plain.tsr"), "--out", got, TSR_DIST_REPORT="1")
            check(p.returncode == 0, f"plain ({n}): runs\n" + p.stderr[-2000:])
            compare(f"plain ({n})", ref, got, n, GRADS)
            calls = [int(c) for c in re.findall(r"collectives: rank 0: graph `[^`]+` ran (\d+)", p.stderr)]
            params_only(f"plain ({n})", calls[2:3])
            continue
        p = run(n, EXAMPLE, "--out", got, "--steps", "10", TSR_DIST_REPORT="1", TSR_DIST_OUTPUT="all")
        check(p.returncode == 0, f"mlp ({n}): runs\n" + p.stderr[-2000:])
        if p.returncode != 0:
            continue
        compare(f"mlp ({n})", ref, got, n, GRADS)
        for r in range(n):
            shape = load(got, r, "ga").shape
            check(shape == (8, 16 // n), f"mlp ({n}): rank {r} holds A's columns {shape}")
        # Rank 0's graph calls in order: mlp (the forward pass), value_and_grad (forward and backward).
        calls = [int(c) for c in re.findall(r"collectives: rank 0: graph `[^`]+` ran (\d+)", p.stderr)]
        fwd = calls[0] if calls else None
        both = calls[1] if len(calls) > 1 else None
        check(fwd == 1, f"mlp ({n}): the forward pass ran {fwd} all-reduce(s), 1 expected")
        check(both is not None and fwd is not None and both - fwd == 1,
              f"mlp ({n}): the backward pass ran {None if both is None else both - (fwd or 0)} all-reduce(s), 1 expected")
        params_only(f"mlp ({n})", calls[2:])
        want, have = final_loss(ref_out), final_loss(p.stdout)
        check(want is not None and have is not None and abs(want - have) <= 1e-5 * max(1.0, abs(want)),
              f"mlp ({n}): 10 SGD steps end at the reference's loss ({have} vs {want})")


RULES = {"two_uses_loss": None, "two_uses_gx": None, "two_uses_ga": 1, "two_uses_gb": 0, "two_uses_gc": 1,
         "mean_loss": None, "mean_gx": None, "mean_ga": 1, "mean_gb": 0,
         "maxcol_loss": None, "maxcol_gx": None, "maxcol_ga": 1,
         "step_loss": None, "step_a": 1, "step_b": 0}


def case_rules(tmp):
    prog = os.path.join(HERE, "tp_rules.tsr")
    ref = os.path.join(tmp, "rules1")
    os.makedirs(ref)
    p = run(1, prog, "--out", ref)
    check(p.returncode == 0, "rules: one rank runs\n" + p.stderr[-2000:])
    GRADS.update(RULES)
    for n in (2, 4):
        if n > MAX[0]:
            print(f"SKIP rules ({n}): {MAX[0]} device(s)")
            continue
        got = os.path.join(tmp, f"rules{n}")
        os.makedirs(got)
        p = run(n, prog, "--out", got, TSR_DIST_REPORT="1")
        check(p.returncode == 0, f"rules ({n}): runs\n" + p.stderr[-2000:])
        if p.returncode != 0:
            continue
        compare(f"rules ({n})", ref, got, n, RULES)
        calls = re.findall(r"collectives: rank 0: graph `([^`#]+)[^`]*` ran (\d+)", p.stderr)
        check(bool(calls) and calls[0][0].startswith("eager") and calls[0][1] == "2",
              f"rules ({n}): two_uses's value_and_grad ran 2 all-reduces (forward 1, X's cotangent 1): {calls[:1]}")
        steps = [int(c) for name, c in calls if name == "train_step"]
        check(steps == [1, 1, 1], f"rules ({n}): each train_step call ran 1 all-reduce: {steps}")


def case_dp_tp(tmp):
    ref, _ = reference(tmp)
    got = os.path.join(tmp, "dptp")
    os.makedirs(got)
    p = run(4, os.path.join(HERE, "tp_dp.tsr"), "--out", got)
    check(p.returncode == 0, "dp_tp: 4 ranks run\n" + p.stderr[-2000:])
    if p.returncode != 0:
        return
    # Ranks 0 and 1 (dp 0) hold tp shards 0 and 1; ranks 2 and 3 (dp 1) the same shards.
    compare("dp_tp (dp 0)", ref, got, 2, ["loss", "gb2", "ga", "gb1", "gb"])
    for r in (2, 3):
        for name in ("loss", "ga", "gb1", "gb", "gb2"):
            a, b = load(got, r, name), load(got, r - 2, name)
            check(close(a, b), f"dp_tp: rank {r} {name} equals rank {r - 2}'s")


def case_bad(tmp):
    p = subprocess.run([TSR, "run", "--devices", "2", os.path.join(HERE, "tp_bad_divide.tsr"), *EXTRA], capture_output=True, text=True,
                       env=env(), timeout=300)
    want = "error[E0208]: `dist.tensor` expects a dimension 1 that divides among the 2 ranks of mesh axis \"tp\" for `x`, not `w` of type Tensor[4, 5, f32] (dimension 1 has 5)"
    check(p.returncode == 1 and want in p.stderr and "tp_bad_divide.tsr:7:" in p.stderr,
          "bad: a shard that does not divide (the checker's error)\n" + p.stderr.strip())
    p = run(2, os.path.join(HERE, "tp_bad_run.tsr"), "--cols", "5")
    want = "dist.tensor(): dimension 1 of `w` (shape (3, 5)) has 5, which does not divide among the 2 ranks of mesh axis \"tp\""
    check(p.returncode == 1 and want in p.stderr and "tp_bad_run.tsr:8:" in p.stderr,
          "bad: a shard that does not divide, known only at run time\n" + p.stderr.strip())
    p = subprocess.run([TSR, "run", "--devices", "2", os.path.join(HERE, "tp_bad_axis.tsr"), *EXTRA], capture_output=True, text=True,
                       env=env(), timeout=300)
    want = "error[E0701]: `dist.tensor` over mesh axis \"tp\", which the mesh (\"dp\",) lacks"
    check(p.returncode == 1 and want in p.stderr, "bad: an axis the mesh lacks (the checker's E0701)\n" + p.stderr.strip())
    p = run(2, os.path.join(HERE, "tp_bad_run.tsr"), "--axis", "mp")
    want = "error[E0701]: `dist.tensor` over mesh axis \"mp\", which the mesh (\"tp\",) lacks"
    check(p.returncode == 1 and want in p.stderr, "bad: an axis the mesh lacks, known only at run time\n" + p.stderr.strip())
    # The checker's shard type: the parameter declared as the whole matrix refuses the shard.
    src = open(os.path.join(HERE, "tp_shard_type.tsr")).read().replace("Tensor[8, 4, f32]", "Tensor[8, 8, f32]")
    whole = os.path.join(tmp, "tp_whole_type.tsr")
    with open(whole, "w") as f:
        f.write(src)
    p = subprocess.run([TSRC, whole, "--check"], capture_output=True, text=True, timeout=300)
    check(p.returncode == 1 and "error[E0201]: argument `a` of `cols` has type Tensor[8, 4, f32] but the parameter expects Tensor[8, 8, f32]" in p.stderr,
          "bad: the checker types dist.tensor as the shard (8, 4)\n" + p.stderr.strip())
    p = run(1, os.path.join(HERE, "tp_shard_type.tsr"))
    check(p.returncode == 1 and "dist.mesh (\"tp\",) (2,) has 2 devices, but the run has 1" in p.stderr,
          "bad: a mesh that does not match --devices\n" + p.stderr.strip())
    p = run(2, os.path.join(HERE, "tp_shard_type.tsr"), TSR_DIST_OUTPUT="all")
    check(p.returncode == 0 and "rank 0: (8, 4) 944.0" in p.stdout and "rank 1: (8, 4) 1072.0" in p.stdout,
          "bad: the checker's shard type (8, 4) and each rank's columns\n" + p.stdout + p.stderr[-1500:])


def main():
    global TSR, TSRC, ROOT, EXAMPLE
    ap = argparse.ArgumentParser()
    ap.add_argument("tsr")
    ap.add_argument("root")
    ap.add_argument("--case", default=None)
    ap.add_argument("--negative", action="store_true")
    ap.add_argument("--device", default=None)
    ap.add_argument("--max-devices", type=int, default=4, help="skip the runs that need more ranks (GPUs)")
    a = ap.parse_args()
    MAX[0] = a.max_devices
    TSR, ROOT = a.tsr, a.root
    TSRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(TSR))), "tsrc", "tsrc")
    EXAMPLE = os.path.join(ROOT, "examples", "tensor_parallel_mlp.tsr")
    if a.device:
        EXTRA.extend(["--device", a.device])
    with tempfile.TemporaryDirectory() as tmp:
        if a.case in (None, "mlp"):
            case_mlp(os.path.join(tmp), a.negative)
        if a.case in (None, "rules") and not a.negative:
            case_rules(tmp)
        if a.case in (None, "dp_tp") and not a.negative and MAX[0] >= 4:
            d = os.path.join(tmp, "dp")
            os.makedirs(d)
            case_dp_tp(d)
        if a.case in (None, "bad") and not a.negative:
            case_bad(tmp)
    print(f"{check.passed} passed, {check.failed} failed")
    sys.exit(1 if check.failed else 0)


if __name__ == "__main__":
    main()
