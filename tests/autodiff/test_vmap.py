#!/usr/bin/env python3
"""vmap on tests/autodiff/programs/vmap.tsr, run with tsr-eval and compared with PyTorch:

    test_vmap.py TSR_EVAL TSRC

- per-example gradients, vmap(grad(loss), in_axes=(None, 0, 0)), of an MLP (tanh, layer_norm,
  softmax, a pytree of parameters) and of a token model's cross-entropy (gather with batched
  indices) against a loop of torch.autograd.grad over the examples (f64, relative 1e-12);
- vmap against a loop over the examples: layout ops (reverse, concat, slice, reshape, transpose,
  broadcast_to, where, argmax) with an unmapped operand; in_axes (1, 0) and out_axes 1 with a
  1-d @ 2-d product; nested vmap (pairwise distances);
- composition: grad of vmap, with and without checkpoint inside, jvp of vmap, vmap of jvp,
  against torch;
- scan (unrolled for now): an RNN's final carry and ys, forwards and reversed, its gradient and
  vmap of it, against a loop in torch;
- a negative control: the per-example gradients compared with the gradient of the batch mean
  (what vmap would give if it summed over the examples) must differ.
Ends with `N passed, N failed`. Needs NumPy and torch (re-runs itself under a Python that has
them, as test_grad.py does).
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_python import reexec_with_torch  # noqa: E402

if __name__ == "__main__":
    reexec_with_torch("autodiff_vmap")

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "programs", "vmap.tsr")
sys.path.insert(0, HERE)
from test_transforms import Runner  # noqa: E402


def t(a):
    return torch.tensor(a, dtype=torch.float64, requires_grad=True)


def layer_norm(h):
    return torch.nn.functional.layer_norm(h, h.shape[-1:], eps=1e-5)


def mlp_loss(w1, b1, w2, x, y):
    h = layer_norm(torch.tanh(x @ w1 + b1))
    out = h @ w2
    return (out - y) ** 2 + 0.1 * (torch.softmax(h, -1) * h).sum()


def layer(w, x):
    return torch.tanh(x @ w) * torch.sigmoid(x)


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    return float(np.abs(a - b).max() / max(1e-300, np.abs(b).max()))


def main():
    tsr_eval, tsrc = sys.argv[1:3]
    rng = np.random.default_rng(3)
    passed = failed = 0

    def check(name, ok, detail):
        nonlocal passed, failed
        if ok:
            passed += 1
            print(f"ok   {name}: {detail}")
        else:
            failed += 1
            print(f"FAIL {name}: {detail}")

    def normal(*shape):
        return rng.standard_normal(shape)

    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run([tsrc, PROGRAM, "--emit=graph"], capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            print(p.stderr[-4000:])
            print("FAIL lowering vmap.tsr\n0 passed, 1 failed")
            return 1
        graphs = os.path.join(tmp, "vmap.graph")
        with open(graphs, "w") as f:
            f.write(p.stdout)
        run = Runner(tsr_eval, graphs, tmp)
        rt = subprocess.run([tsrc, graphs, "--read-graph"], capture_output=True, text=True, timeout=600)
        check("graph text round trip", rt.returncode == 0 and rt.stdout.strip() == p.stdout.strip(), rt.stderr.strip()[:200])

        # Per-example gradients against a loop of torch.autograd.grad, at two batch sizes (N is
        # symbolic in the graph).
        for n in (5, 1):
            D, H = 4, 6
            w1, b1, w2, xs, ys = normal(D, H), normal(H), normal(H), normal(n, D), normal(n)
            got = run("per_example_grads", w1, b1, w2, xs, ys)
            want = [[], [], []]
            for i in range(n):
                params = [t(w1), t(b1), t(w2)]
                loss = mlp_loss(*params, torch.tensor(xs[i]), torch.tensor(ys[i]))
                for k, g in enumerate(torch.autograd.grad(loss, params)):
                    want[k].append(g.numpy())
            errs = [rel(g, np.stack(w)) for g, w in zip(got, want)]
            check(f"per-example gradients MLP N={n}", max(errs) < 1e-12, "relative errors " + ", ".join(f"{e:.1e}" for e in errs))
            if n == 5:
                mean_grad = np.broadcast_to(np.mean(np.stack(want[0]), axis=0), got[0].shape)
                check("negative control: per-example gradients differ from the batch mean's", rel(got[0], mean_grad) > 1e-3,
                      f"relative difference {rel(got[0], mean_grad):.2e}")

        D, C, T, n = 5, 7, 4, 3
        w, xs = normal(D, C), normal(n, T, D)
        labels = rng.integers(0, C, size=(n, T)).astype(np.int64)
        (got,) = run("token_grads", w, xs, labels)
        want = []
        for i in range(n):
            wt = t(w)
            loss = torch.nn.functional.cross_entropy(torch.tensor(xs[i]) @ wt, torch.tensor(labels[i]))
            want.append(torch.autograd.grad(loss, wt)[0].numpy())
        e = rel(got, np.stack(want))
        check("per-example gradients cross-entropy", e < 1e-12, f"relative error {e:.1e}")

        # vmap against a loop.
        n = 4
        xs, m = normal(n, 6), normal(2, 3)
        got = run("layout_batched", xs, m)
        want = [[], [], [], []]
        for i in range(n):
            x = xs[i]
            r = x[::-1]
            a = np.concatenate([r[0:3], x.reshape(2, 3)[1]])
            b = (m + a.reshape(2, 3)).T
            c = np.broadcast_to(a[None, :], (2, 6))
            for k, v in enumerate([np.where(x > 0, x, a * 2.0), b @ m, c.sum(0), np.argmax(x)]):
                want[k].append(v)
        errs = [rel(g, np.stack(w)) for g, w in zip(got, want)]
        check("vmap of layout ops = loop", max(errs) == 0, "max relative differences " + ", ".join(f"{e:.1e}" for e in errs))

        A, Bs = normal(3, n), normal(n, 3, 4)
        (got,) = run("vecmat_axes", A, Bs)
        want = np.stack([A[:, i] @ Bs[i] for i in range(n)], axis=1)
        check("in_axes (1, 0), out_axes 1", rel(got, want) < 1e-14, f"shape {got.shape}, relative error {rel(got, want):.1e}")

        X, Y = normal(5, 3), normal(4, 3)
        (got,) = run("pairwise", X, Y)
        want = ((Y[:, None, :] - X[None, :, :]) ** 2).sum(-1)
        check("nested vmap", rel(got, want) < 1e-14, f"shape {got.shape}, relative error {rel(got, want):.1e}")

        # Composition with grad, checkpoint and jvp.
        w, xs, dw, dxs = normal(4, 4), normal(n, 4), normal(4, 4), normal(n, 4)
        wt = t(w)
        loss = (layer(wt, torch.tensor(xs)) ** 2).sum()
        gw = torch.autograd.grad(loss, wt)[0].numpy()
        (got,) = run("grad_of_vmap", w, xs)
        check("grad of vmap", rel(got, gw) < 1e-13, f"relative error {rel(got, gw):.1e}")
        (got,) = run("grad_of_vmap_checkpoint", w, xs)
        check("grad of vmap of checkpoint", rel(got, gw) < 1e-13, f"relative error {rel(got, gw):.1e}")
        ckpt = [ln for ln in p.stdout.split("graph @")
                if ln.startswith("grad_of_vmap_checkpoint(")]
        check("checkpoint inside vmap is recomputed", bool(ckpt) and "remat" in ckpt[0], "ops with remat in grad_of_vmap_checkpoint")

        def jvp_w(fn, primal, tangent):
            # Forward-mode derivative by the double-vjp trick (torch 1.13 has no torch.func).
            p = t(primal)
            y = fn(p)
            u = torch.zeros_like(y, requires_grad=True)
            (g,) = torch.autograd.grad(y, p, u, create_graph=True)
            (jv,) = torch.autograd.grad(g, u, torch.tensor(tangent))
            return jv.numpy()

        want = jvp_w(lambda v: layer(v, torch.tensor(xs)), w, dw)
        (got,) = run("jvp_of_vmap", w, xs, dw)
        check("jvp of vmap", rel(got, want) < 1e-13, f"relative error {rel(got, want):.1e}")
        want = np.stack([jvp_w(lambda u: layer(torch.tensor(w), u), xs[i], dxs[i]) for i in range(n)])
        (got,) = run("vmap_of_jvp", w, xs, dxs)
        check("vmap of jvp", rel(got, want) < 1e-13, f"relative error {rel(got, want):.1e}")

        # scan against a loop in torch.
        w, h, xs = normal(4, 4) * 0.5, normal(4), normal(5, 4)

        def rnn_torch(wt, h, xs, reverse=False):
            c, ys = torch.tensor(h), [None] * 5
            for i in (reversed(range(5)) if reverse else range(5)):
                x = torch.tensor(xs[i])
                ys[i] = c if reverse else (c * x).sum()
                c = torch.tanh(c @ wt + x)
            return c, torch.stack(ys)

        got = run("rnn", w, h, xs)
        want = [v.detach().numpy() for v in rnn_torch(torch.tensor(w), h, xs)]
        errs = [rel(g, v) for g, v in zip(got, want)]
        check("scan = loop", max(errs) < 1e-14, "relative errors " + ", ".join(f"{e:.1e}" for e in errs))
        got = run("rnn_reverse", w, h, xs)
        want = [v.detach().numpy() for v in rnn_torch(torch.tensor(w), h, xs, reverse=True)]
        errs = [rel(g, v) for g, v in zip(got, want)]
        check("scan reverse=True = loop from the end", max(errs) < 1e-14, "relative errors " + ", ".join(f"{e:.1e}" for e in errs))
        wt = t(w)
        c, ys = rnn_torch(wt, h, xs)
        gw = torch.autograd.grad(c.sum() + ys.sum(), wt)[0].numpy()
        (got,) = run("rnn_grad", w, h, xs)
        check("grad of scan", rel(got, gw) < 1e-13, f"relative error {rel(got, gw):.1e}")
        hs = normal(3, 4)
        (got,) = run("rnn_batched", w, hs, xs)
        want = np.stack([rnn_torch(torch.tensor(w), hs[i], xs)[0].numpy() for i in range(3)])
        check("vmap of scan", rel(got, want) < 1e-14, f"relative error {rel(got, want):.1e}")

    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
