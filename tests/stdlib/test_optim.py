#!/usr/bin/env python3
"""The stdlib optimizers (stdlib/optim/{sgd,momentum,adam,adamw}.tsr) against torch.optim on the CPU.

Usage: test_optim.py TSR

For each case: random f32 parameters {"w": matrix, "b": vector, "s": 0-d} and one random gradient
per step (NumPy, fixed seed) are written to an .npz; tests/stdlib/optim_step.tsr runs the stdlib
optimizer over them with `tsr run` and saves the final parameters; torch.optim runs the same
steps with the same hyper-parameters by assigning p.grad before each step(). The final parameters
must agree to a relative tolerance of f32 rounding over a few steps. The language specification
(section 11) says the optimizers' defaults and updates are PyTorch's, so torch is the reference.

Prints one line per case with the largest error, then "N passed, M failed"; exits 1 on any
failure, and 77 (a visible skip under ctest's SKIP_RETURN_CODE) where no Python has torch and numpy.
"""

import os
import subprocess
import sys
import tempfile


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_python import reexec_with_torch  # noqa: E402

if __name__ == "__main__":
    reexec_with_torch("stdlib_optim")

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "optim_step.tsr")
STEPS = 6
# Relative to the largest parameter magnitude of the case, plus a small absolute floor: the two
# sides round differently in f32 (fused vs. unfused, order of operations), a few ulps per step.
RTOL = 1e-5
ATOL = 1e-6

# (name, stdlib optimizer, tsr flags, torch constructor). Hyper-parameters are passed explicitly on
# both sides except in the "defaults" cases, which call update without keywords (--defaults 1) and
# so check that the stdlib's defaults are torch's (lr has no default in torch.optim.SGD; the
# stdlib's documented 1e-3 is passed to torch there, and momentum=0.9 is optim.momentum's).
CASES = [
    ("sgd lr=0.1", "sgd", {"lr": 0.1},
     lambda ps: torch.optim.SGD(ps, lr=0.1)),
    ("sgd lr=0.05 wd=0.1", "sgd", {"lr": 0.05, "weight_decay": 0.1},
     lambda ps: torch.optim.SGD(ps, lr=0.05, weight_decay=0.1)),
    ("sgd defaults", "sgd", {"defaults": 1},
     lambda ps: torch.optim.SGD(ps, lr=1e-3)),
    ("momentum defaults", "momentum", {"defaults": 1},
     lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=0.9)),
    ("momentum m=0.8 damp=0.3 wd=0.05", "momentum",
     {"lr": 0.1, "momentum": 0.8, "dampening": 0.3, "weight_decay": 0.05},
     lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.8, dampening=0.3, weight_decay=0.05)),
    ("momentum nesterov m=0.9 wd=0.01", "momentum",
     {"lr": 0.1, "momentum": 0.9, "nesterov": 1, "weight_decay": 0.01},
     lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("adam defaults", "adam", {"defaults": 1},
     lambda ps: torch.optim.Adam(ps)),
    ("adam lr=0.01 betas=(0.8,0.99) eps=1e-6 wd=0.1", "adam",
     {"lr": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.1},
     lambda ps: torch.optim.Adam(ps, lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("adamw defaults", "adamw", {"defaults": 1},
     lambda ps: torch.optim.AdamW(ps)),
    ("adamw lr=0.01 betas=(0.85,0.995) wd=0.3", "adamw",
     {"lr": 0.01, "beta1": 0.85, "beta2": 0.995, "weight_decay": 0.3},
     lambda ps: torch.optim.AdamW(ps, lr=0.01, betas=(0.85, 0.995), weight_decay=0.3)),
    ("adamw wd=0", "adamw", {"lr": 0.01, "weight_decay": 0.0},
     lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.0)),
]

SHAPES = {"w": (5, 7), "b": (7,), "s": ()}


def make_data(seed):
    rng = np.random.default_rng(seed)
    data = {k: rng.standard_normal(shape).astype(np.float32) for k, shape in SHAPES.items()}
    for t in range(STEPS):
        # A scale per step spanning two decades: with stationary gradients the bias-corrected
        # moments hardly depend on the betas, and a wrong beta would go unnoticed.
        scale = 10.0 ** rng.uniform(-1.0, 1.0)
        for k, shape in SHAPES.items():
            data[f"g{t}_{k}"] = (scale * rng.standard_normal(shape)).astype(np.float32)
    return data


def run_tsr(tsr, opt, flags, inp, out):
    cmd = [tsr, "run", PROGRAM, "--opt", opt, "--inp", inp, "--out", out, "--steps", str(STEPS)]
    for k, v in flags.items():
        cmd += [f"--{k}", repr(v)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    z = np.load(out)
    return {k: z[k] for k in z.files}


def run_torch(make_opt, data):
    params = {k: torch.tensor(data[k]) for k in SHAPES}
    opt = make_opt(list(params.values()))
    for t in range(STEPS):
        for k, p in params.items():
            p.grad = torch.tensor(data[f"g{t}_{k}"])
        opt.step()
    return {k: p.detach().numpy() for k, p in params.items()}


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2])
        return 2
    tsr = sys.argv[1]
    torch.manual_seed(0)
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="tsr_optim_") as tmp:
        for i, (name, opt, flags, make_opt) in enumerate(CASES):
            data = make_data(1000 + i)
            inp = os.path.join(tmp, f"in{i}.npz")
            out = os.path.join(tmp, f"out{i}.npz")
            np.savez(inp, **data)
            try:
                got = run_tsr(tsr, opt, flags, inp, out)
            except Exception as e:  # a failure to run is a failed case, not a crash of the test
                print(f"FAIL {name}: {e}")
                failed += 1
                continue
            want = run_torch(make_opt, data)
            ok = True
            max_err = 0.0
            problems = []
            for k in SHAPES:
                if k not in got or got[k].shape != want[k].shape or got[k].dtype != np.float32:
                    problems.append(f"{k}: got {got.get(k, None) if k not in got else (got[k].dtype, got[k].shape)}")
                    ok = False
                    continue
                err = float(np.max(np.abs(got[k].astype(np.float64) - want[k].astype(np.float64))))
                scale = float(np.max(np.abs(want[k])))
                max_err = max(max_err, err)
                if not err <= ATOL + RTOL * scale:
                    problems.append(f"{k}: max abs err {err:.3g} > {ATOL + RTOL * scale:.3g}")
                    ok = False
            # The parameters must have moved: a program that saved its input would otherwise pass
            # any case whose steps are tiny.
            moved = max(float(np.max(np.abs(want[k] - data[k]))) for k in SHAPES)
            if moved < 100 * (ATOL + RTOL):
                problems.append(f"torch moved the parameters by only {moved:.3g}; the case checks nothing")
                ok = False
            status = "ok  " if ok else "FAIL"
            print(f"{status} {name}: max abs err {max_err:.3g} (params moved {moved:.3g})"
                  + ("" if ok else "; " + "; ".join(problems)))
            passed += ok
            failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
