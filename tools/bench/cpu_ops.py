#!/usr/bin/env python3
"""The CPU benchmark: Tessera's compiled path against PyTorch on this CPU, as ratios.

    cpu_ops.py TSR [--reps N] [--rounds N] [--threads N] [--big N] [--big-rounds N] [--train 0|1]
               [--tuned N] [--torch 0|1]

Runs tools/bench/cpu_ops.tsr with `tsr run` (GEMM f32 1024^3, nn.layer_norm, nn.rms_norm and
nn.softmax over [4096, 1024] f32, each a @jit graph compiled through fusion -> Tile IR -> LLVM;
the normalizations once as row steps (static row length) and once as the multi-step plan
(`_steps`, a symbolic row length); GEMM f32 big^3 (default 4096, 0 skips it; best of
--big-rounds single calls, default 2); the main job's training step: value_and_grad and
adamw.update of examples/digits_vit.tsr on 64 images) and the same ops in PyTorch (torch.matmul,
F.layer_norm with weight and bias, x * rsqrt(mean(x^2) + eps) * w (F.rms_norm where the torch has
it), torch.softmax, and tools/bench/digits_vit_torch.py's model with loss.backward() and
torch.optim.AdamW) with torch.set_num_threads(threads) (default: the cores this process may run
on, which Tessera's launches use), in the same run. The first line says which BLAS the torch links
(BLAS_INFO; Debian's 1.13 says `generic`, the reference BLAS, so its GEMMs are no baseline; a
PyTorch wheel says `mkl` or `open`). Tessera runs on the CPU whatever TSR_DEVICE says. Each figure is the best of `rounds` rounds of `reps` calls after a warm-up call (which
compiles, for Tessera). Prints a Markdown table: seconds per call, GFLOP/s or GB/s, and the ratio
tessera_time / torch_time (below 1: Tessera is faster). Checksums guard against a fast wrong
result: sum(y^2) of layer_norm is about rows*size and sum(softmax) is rows whatever the data;
the training step's is its first loss (about log 10 = 2.30 on both sides); the GEMM's depends on the data, which the two sides draw from different generators (Tessera's
Philox, torch's), so only its magnitude compares (the compiled GEMM's correctness is the
compiled_vs_reference test's).

Tessera's run takes the heuristic's matmul tiles (`--autotune=off`). --tuned N runs its GEMMs N
times more in processes of their own under `--autotune=full` (exec/MatMulTuning.h: the first's
warm-up call times the tile candidates of each product, or takes a winner recorded in the
persistent cache by an earlier run; the others take the record), alternating with N - 1 more
untuned ones, each row the best of its runs; it adds the rows `gemm (tuned)`, the tuned time over
the untuned one, and the tuning's report (each candidate's median time and the winner).
--torch 0 skips PyTorch (a machine whose torch links the reference BLAS has no GEMM baseline).

Needs torch: runs itself again under /usr/bin/python3 (or TSR_TORCH_PYTHON) when the current
interpreter lacks it.
"""
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _ensure_torch():
    try:
        import torch  # noqa: F401
        return
    except ImportError:
        pass
    for c in [os.environ.get("TSR_TORCH_PYTHON"), "/usr/bin/python3"]:
        if c and os.path.exists(c) and os.path.realpath(c) != os.path.realpath(sys.executable):
            os.execv(c, [c, os.path.abspath(__file__)] + sys.argv[1:])
    sys.exit("cpu_ops.py: needs a Python with torch (set TSR_TORCH_PYTHON)")


def arg(name, default):
    if name in sys.argv:
        return int(sys.argv[sys.argv.index(name) + 1])
    return default


def best_of(fn, reps, rounds):
    fn()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def run_tessera(tsr, root, reps, rounds, big, big_rounds, train, autotune, norms=1):
    """{name: (seconds, checksum)} of one `tsr run` of cpu_ops.tsr, and its stderr."""
    env = dict(os.environ, TESSERA_PATH=os.path.join(root, "examples"), TSR_AUTOTUNE_VERBOSE="1")
    r = subprocess.run([tsr, "run", os.path.join(HERE, "cpu_ops.tsr"), "--device", "cpu", f"--autotune={autotune}",
                        "--reps", str(reps), "--rounds", str(rounds), "--big", str(big), "--big_rounds", str(big_rounds),
                        "--train", str(train), "--norms", str(norms),
                        "--data", os.path.join(root, "examples", "data", "digits.csv.gz")],
                       capture_output=True, text=True, env=env, cwd=root)
    if r.returncode != 0:
        sys.exit("tsr run failed:\n" + r.stderr)
    out = {}
    for line in r.stdout.splitlines():
        name, secs, check = line.split()
        out[name] = (float(secs), float(check))
    return out, r.stderr


def main():
    with_torch = arg("--torch", 1)
    if with_torch:
        _ensure_torch()
        import torch
        import torch.nn.functional as F

    tsr = sys.argv[1]
    reps, rounds, threads = arg("--reps", 10), arg("--rounds", 3), arg("--threads", len(os.sched_getaffinity(0)))
    big, big_rounds, train = arg("--big", 4096), arg("--big-rounds", 2), arg("--train", 1)
    tuned = arg("--tuned", 0)
    size, rows = 1024, 4096

    root = os.path.abspath(os.path.join(HERE, "..", ".."))
    tess, _ = run_tessera(tsr, root, reps, rounds, big, big_rounds, train, "off")
    winners = []
    for i in range(tuned):
        # Tuned and untuned GEMM runs alternate, each row the best of its runs, so that a change
        # of the machine's load between two processes does not pass for the tuning's effect.
        if i > 0:
            t1, _ = run_tessera(tsr, root, reps, rounds, big, big_rounds, 0, "off", norms=0)
            for name in ("gemm", "gemm_big"):
                if name in t1 and t1[name][0] < tess[name][0]:
                    tess[name] = t1[name]
        t2, stderr = run_tessera(tsr, root, reps, rounds, big, big_rounds, 0, "full", norms=0)
        for name in ("gemm", "gemm_big"):
            if name in t2 and (name + "_tuned" not in tess or t2[name][0] < tess[name + "_tuned"][0]):
                tess[name + "_tuned"] = t2[name]
        if i == 0:
            winners = [line[len("autotune: "):] for line in stderr.splitlines()
                       if line.startswith("autotune: matmul") or line.startswith("autotune:   BM=")]
    if not with_torch:
        report(tess, {}, size, rows, big, reps, rounds, winners, "threads: Tessera's launches on every usable core; no PyTorch (--torch 0)")
        return

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    a, b = torch.randn(size, size), torch.randn(size, size)
    x = torch.randn(rows, size)
    w, bias = torch.ones(size), torch.zeros(size)

    def rms(t, weight):
        if hasattr(F, "rms_norm"):
            return F.rms_norm(t, (size,), weight, eps=1e-6)
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
    torch_t = {
        "gemm": (best_of(lambda: a @ b, reps, rounds), float((a @ b).sum())),
        "layer_norm": (best_of(lambda: F.layer_norm(x, (size,), w, bias), reps, rounds),
                       float((F.layer_norm(x, (size,), w, bias) ** 2).sum())),
        "softmax": (best_of(lambda: torch.softmax(x, -1), reps, rounds), float(torch.softmax(x, -1).sum())),
        "rms_norm": (best_of(lambda: rms(x, w), reps, rounds), float((rms(x, w) ** 2).sum())),
    }
    for name in ["layer_norm", "softmax", "rms_norm"]:
        torch_t[name + "_steps"] = torch_t[name]
    if big > 0:
        ab, bb = torch.randn(big, big), torch.randn(big, big)
        # No warm-up call: a BLAS compiles nothing, and the reference BLAS takes tens of seconds.
        best = float("inf")
        for _ in range(big_rounds):
            t0 = time.perf_counter()
            cb = ab @ bb
            best = min(best, time.perf_counter() - t0)
        torch_t["gemm_big"] = (best, float(cb.sum()))
    if train > 0:
        sys.path.insert(0, HERE)
        import digits_vit_torch as dv
        xt, yt = dv.load_digits(os.path.join(root, "examples", "data", "digits.csv.gz"))
        model = dv.build_model()
        opt = dv.make_optimizer(model, 1e-3)
        first = dv.train_step(model, opt, xt[:64], yt[:64])
        torch_t["train_step"] = (best_of(lambda: dv.train_step(model, opt, xt[:64], yt[:64]), reps, rounds), first)
    for name in ("gemm", "gemm_big"):
        torch_t[name + "_tuned"] = torch_t.get(name)
    blas = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    blas = blas.group(1) if blas else "unknown"
    report(tess, torch_t, size, rows, big, reps, rounds, winners,
           f"threads: {threads} (torch {torch.__version__}, BLAS_INFO={blas}"
           f"{': the reference BLAS, no GEMM baseline' if blas == 'generic' else ''})")


def report(tess, torch_t, size, rows, big, reps, rounds, winners, header):
    """The Markdown table; `torch_t` empty: Tessera's figures alone."""
    work = {  # (amount, unit): flops for gemm, bytes moved (read x, write y) for the others
        "gemm": (2.0 * size ** 3, "GFLOP/s"),
        "layer_norm": (2.0 * 4 * rows * size, "GB/s"),
        "softmax": (2.0 * 4 * rows * size, "GB/s"),
        "rms_norm": (2.0 * 4 * rows * size, "GB/s"),
        "gemm_big": (2.0 * big ** 3, "GFLOP/s"),
        "train_step": (64.0e6, "k images/s"),  # 64 images a step; the 1e6 makes the 1e9 below 1e3
    }
    for name in ["layer_norm", "softmax", "rms_norm"]:
        work[name + "_steps"] = work[name]
    for name in ("gemm", "gemm_big"):
        work[name + "_tuned"] = work[name]
    print(f"{header}, reps {reps}, best of {rounds} rounds; load average {os.getloadavg()[0]:.1f}, "
          f"{len(os.sched_getaffinity(0))} cores usable")
    print()
    print("| op | Tessera | PyTorch | ratio (Tessera / PyTorch) | checksums (Tessera, PyTorch) |")
    print("|---|---|---|---|---|")
    for name in ["gemm", "gemm_tuned", "gemm_big", "gemm_big_tuned", "train_step", "layer_norm", "layer_norm_steps", "rms_norm",
                 "rms_norm_steps", "softmax", "softmax_steps"]:
        if name not in tess:
            continue
        ts, tc = tess[name]
        amount, unit = work[name]
        label = name.replace("gemm_big", f"gemm {big}^3").replace("_tuned", " (tuned)")
        if name in torch_t and torch_t[name]:
            ps, pc = torch_t[name]
            print(f"| {label} | {ts * 1e3:.2f} ms ({amount / ts / 1e9:.1f} {unit}) | {ps * 1e3:.2f} ms ({amount / ps / 1e9:.1f} {unit}) "
                  f"| {ts / ps:.2f} | {tc:.4e}, {pc:.4e} |")
        else:
            print(f"| {label} | {ts * 1e3:.2f} ms ({amount / ts / 1e9:.1f} {unit}) | - | - | {tc:.4e}, - |")
    for name in ("gemm", "gemm_big"):
        if name + "_tuned" in tess and name in tess:
            label = name.replace("gemm_big", f"gemm {big}^3")
            print(f"\n{label}: tuned / untuned time {tess[name + '_tuned'][0] / tess[name][0]:.2f}", end="")
    if winners:
        print("\n\nthe tuned run's report (TSR_AUTOTUNE_VERBOSE=1):\n" + "\n".join("    " + w for w in winners))
    else:
        print()


if __name__ == "__main__":
    main()
