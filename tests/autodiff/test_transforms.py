#!/usr/bin/env python3
"""The autodiff transforms on tests/autodiff/programs/transforms.tsr, run with tsr-eval:

    test_transforms.py TSR_EVAL TSRC LIVE_BYTES

- jvp against vjp: <J v, u> equals <v, J^T u> for random v and u (f64, relative 1e-12), for a
  function of two tensors and one of a dict pytree with two outputs;
- custom_vjp: a softmax with a hand-written backward rule gives plain reverse mode's gradient,
  and a straight-through round (whose plain gradient is an error) gives its rule's gradient;
- checkpoint: the same value and gradients as without it (f32, equal to rounding), and a lower
  peak of live bytes (ir/analysis/LiveBytes.h) on a chain of 24 layers; the figures are printed;
- @loss_scale: in f16, gradients of 2e-8 underflow to zero without scaling and are exact with
  @loss_scale(1024);
- a second derivative (grad of grad) equals 6x for sum(x^3);
- a graph with symbolic shapes (one per N, a stepped slice of a symbolic extent) against torch;
- the lowered graphs (with checkpoint's `remat` attributes) read back as printed.
Ends with `N passed, N failed`. Needs NumPy (re-runs itself under a Python that has it, as
test_grad.py does).
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_python import reexec_with_torch  # noqa: E402

if __name__ == "__main__":
    reexec_with_torch("autodiff_transforms")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "programs", "transforms.tsr")


class Runner:
    def __init__(self, tsr_eval, graphs, tmp):
        self.tsr_eval, self.graphs, self.tmp, self.n = tsr_eval, graphs, tmp, 0

    def __call__(self, graph, *inputs):
        args = []
        for v in inputs:
            self.n += 1
            path = os.path.join(self.tmp, f"in{self.n}.npy")
            np.save(path, v)
            args += ["--in", path]
        out = os.path.join(self.tmp, f"out{self.n}")
        os.makedirs(out)
        p = subprocess.run([self.tsr_eval, self.graphs, "--graph", graph, *args, "--out-dir", out], capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"tsr-eval {graph}: {p.stderr.strip()}")
        files = sorted((f for f in os.listdir(out) if f.endswith(".npy")), key=lambda f: int(f[3:-4]))
        return [np.load(os.path.join(out, f)) for f in files]


def main():
    tsr_eval, tsrc, live_bytes = sys.argv[1:4]
    rng = np.random.default_rng(7)
    passed = failed = 0

    def check(name, ok, detail):
        nonlocal passed, failed
        if ok:
            passed += 1
            print(f"ok   {name}: {detail}")
        else:
            failed += 1
            print(f"FAIL {name}: {detail}")

    def normal(*shape, dtype=np.float64):
        return rng.standard_normal(shape).astype(dtype)

    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run([tsrc, PROGRAM, "--emit=graph"], capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            print(p.stderr[-4000:])
            print("FAIL lowering transforms.tsr\n0 passed, 1 failed")
            return 1
        graphs = os.path.join(tmp, "transforms.graph")
        with open(graphs, "w") as f:
            f.write(p.stdout)
        run = Runner(tsr_eval, graphs, tmp)
        # The derivatives' graphs (checkpoint clones carry a `remat` attribute) read back as printed.
        rt = subprocess.run([tsrc, graphs, "--read-graph"], capture_output=True, text=True, timeout=600)
        check("graph text round trip", rt.returncode == 0 and rt.stdout.strip() == p.stdout.strip() and "remat" in p.stdout,
              f"{p.stdout.count('remat =')} ops with remat; {rt.stderr.strip()[:200]}")

        # jvp against vjp.
        for trial in range(3):
            x, w, vx, vw, u = normal(4, 6), normal(6, 5), normal(4, 6), normal(6, 5), normal(4, 5)
            (t,) = run("mlp_jvp", x, w, vx, vw)
            gx, gw = run("mlp_vjp", x, w, u)
            lhs, rhs = float((t * u).sum()), float((vx * gx).sum() + (vw * gw).sum())
            rel = abs(lhs - rhs) / max(1.0, abs(lhs))
            check(f"jvp_vjp mlp #{trial}", rel < 1e-12, f"<Jv,u> {lhs:.15g} <v,J^T u> {rhs:.15g} rel {rel:.1e}")
        for trial in range(2):
            wq, wk, x = normal(4, 4), normal(4, 4), normal(3, 4)
            vq, vk, vx = normal(4, 4), normal(4, 4), normal(3, 4)
            u0, u1 = normal(3, 4), normal(3)
            t0, t1 = run("attn_jvp", wq, wk, x, vq, vk, vx)
            gq, gk, gx = run("attn_vjp", wq, wk, x, u0, u1)
            lhs = float((t0 * u0).sum() + (t1 * u1).sum())
            rhs = float((vq * gq).sum() + (vk * gk).sum() + (vx * gx).sum())
            rel = abs(lhs - rhs) / max(1.0, abs(lhs))
            check(f"jvp_vjp attention pytree #{trial}", rel < 1e-12, f"<Jv,u> {lhs:.15g} <v,J^T u> {rhs:.15g} rel {rel:.1e}")

        # custom_vjp.
        x, w = normal(4, 5), normal(4, 5)
        (gc,) = run("grad_custom", x, w)
        (gp,) = run("grad_plain", x, w)
        err = float(np.abs(gc - gp).max())
        check("custom_vjp softmax = plain", err < 1e-12 and np.abs(gp).max() > 0, f"max difference {err:.1e}")
        x, w = normal(6) * 3, normal(6)
        (gs,) = run("grad_ste", x, w)
        check("custom_vjp straight-through round", np.array_equal(gs, w), f"gradient {gs} (the rule gives w)")

        # checkpoint: equal results, lower peak.
        h, wm = normal(64, 64, dtype=np.float32), (normal(64, 64, dtype=np.float32) * 0.05).astype(np.float32)
        plain = run("grad_chain_plain", h, wm)
        ckpt = run("grad_chain_ckpt", h, wm)
        errs = [float(np.abs(a - b).max() / max(1e-30, np.abs(a).max())) for a, b in zip(plain, ckpt)]
        check("checkpoint gradients = plain", max(errs) < 1e-5, "relative differences " + ", ".join(f"{e:.1e}" for e in errs))
        lb = subprocess.run([live_bytes, graphs], capture_output=True, text=True, timeout=120)
        peaks = dict(re.findall(r"^@(\S+) peak=(\d+)", lb.stdout, re.M))
        if "grad_chain_plain" in peaks and "grad_chain_ckpt" in peaks:
            a, b = int(peaks["grad_chain_plain"]), int(peaks["grad_chain_ckpt"])
            check("checkpoint lowers peak live bytes", b < a * 0.6,
                  f"peak {a} bytes without checkpoint, {b} with ({b / a:.0%}); a layer's activation is {64 * 64 * 4} bytes")
        else:
            check("checkpoint lowers peak live bytes", False, f"live_bytes printed {lb.stdout!r} {lb.stderr!r}")

        # @loss_scale.
        x = np.linspace(1, 2, 8).astype(np.float32)
        (g0,) = run("grad_tiny", x)
        (g1,) = run("grad_tiny_scaled", x)
        want = np.float32(0.0001 * 0.0002)
        check("loss_scale keeps small gradients", np.all(g0 == 0) and np.allclose(g1, want, rtol=2e-3),
              f"unscaled f16 gradient {g0[0]:.3g}, with @loss_scale(1024) {g1[0]:.4g} (exact {want:.4g})")
        (g2,) = run("grad_tiny_declared", x)
        check("loss_scale on the declared return type", np.allclose(g2, want, rtol=2e-3), f"gradient {g2[0]:.4g}")
        check("loss_scale in the graph", "1024.0" in p.stdout.split("graph @grad_tiny_scaled")[1].split("graph @")[0],
              "the seed is 1024 and the gradient is divided by it")

        # Symbolic shapes: the generic graph at two sizes (odd N: the stepped slice's count is
        # a ceiling), against torch.
        import torch
        import torch.nn.functional as F
        for n in (5, 8):
            w, x = normal(3, 4, dtype=np.float32), normal(n, 3, dtype=np.float32)
            y = rng.integers(0, 3, (n,)).astype(np.int32)
            value, gw = run("sym_step", w, x, y)
            tw = torch.tensor(w, dtype=torch.float64, requires_grad=True)
            h = F.layer_norm(torch.tensor(x, dtype=torch.float64) @ tw, (4,), eps=1e-5)
            ref = F.cross_entropy(h[:, 1:], torch.tensor(y, dtype=torch.long)) + (h[::2] ** 2).sum() * 0.1
            ref.backward()
            err = float(np.abs(gw - tw.grad.numpy()).max() / np.abs(tw.grad.numpy()).max())
            check(f"symbolic shapes N={n}", abs(float(value) - ref.item()) < 1e-5 and err < 1e-5, f"gradient max relative error {err:.1e} (f32)")

        # grad of grad.
        x = normal(5)
        (d2,) = run("cube_second", x)
        check("second derivative", np.allclose(d2, 6 * x, rtol=1e-12), f"max error {float(np.abs(d2 - 6 * x).max()):.1e}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
