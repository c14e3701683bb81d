#!/usr/bin/env python3
"""scan as a Graph IR region op (tests/autodiff/programs/scan.tsr), against PyTorch loops:

    test_scan.py TSR_EVAL TSRC [--negative]

- the graph: each scan is one `scan` op whose body holds the step's ops once (an RNN's tanh
  appears once however long the scan), and the text form reads back to the same text;
- values and gradients (torch.autograd, f64, relative 1e-12) of an RNN with a closed-over
  weight (also with the body checkpointed, whose vjp stores only the carries: checked on the
  graph's text), of the same scan reversed, of a pytree carry (tuple) over pytree xs (dict), of a scan
  with `length` and no xs, of a stack of residual MLP layers over stacked parameters, of a scan
  nested in a scan's body (and vmap of its gradient); vmap of a scan against a loop over the
  examples; jvp of a scan against torch.autograd.functional.jvp;
- every case runs on the reference evaluator and on the compiled CPU executor (TSR_EXECUTOR=
  compiled), which must report that it ran the scans with compiled launches.

--negative computes every reference in the wrong order of steps (the xs or the stacked layers
reversed; the scan without xs one step short) and applies the lowered-once check to a Python
loop, so every check must FAIL: the negative control (tests/CMakeLists.txt, negative_scan).
Ends with `N passed, N failed`. Needs NumPy and torch.
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_python import reexec_with_torch  # noqa: E402

if __name__ == "__main__":
    reexec_with_torch("autodiff_scan")

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "programs", "scan.tsr")
NEGATIVE = "--negative" in sys.argv


def t(a):
    return torch.tensor(a, dtype=torch.float64, requires_grad=True)


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    return float(np.abs(a - b).max() / max(1e-300, np.abs(b).max()))


def order(n, reverse=False):
    """The steps' order; the negative control runs them the other way."""
    idx = list(range(n))[::-1] if reverse else list(range(n))
    return idx[::-1] if NEGATIVE else idx


def rnn(w, h, xs, reverse=False, y_is_carry=False):
    c, ys = h, [None] * xs.shape[0]
    for i in order(xs.shape[0], reverse):
        ys[i] = c if y_is_carry else (c * xs[i]).sum()
        c = torch.tanh(c @ w + xs[i])
    return c, torch.stack(ys)


def tree(h, s, a, b):
    hs, ss = [None] * a.shape[0], [None] * a.shape[0]
    for i in order(a.shape[0]):
        h2 = torch.sigmoid(h * a[i] + b[i])
        hs[i], ss[i] = h2, s
        s = s + (h2 * a[i]).sum()
        h = h2
    return (h, s), (torch.stack(hs), torch.stack(ss))


def powers(m, v, n=7):
    c, ys = v, []
    for _ in range(n - 1 if NEGATIVE else n):
        ys.append(c)
        c = c @ m + 1.0
    return c, torch.stack(ys)


def stack(w1, b1, w2, x):
    sums = [None] * w1.shape[0]
    for i in order(w1.shape[0]):
        sums[i] = x.sum()
        h = torch.nn.functional.layer_norm(x, x.shape[-1:], eps=1e-5)
        x = x + torch.nn.functional.gelu(h @ w1[i] + b1[i]) @ w2[i]
    return x, torch.stack(sums)


def nested_loss(xs):
    c, ys = torch.tensor(1.0, dtype=torch.float64), [None] * xs.shape[0]
    for i in order(xs.shape[0]):
        a = c
        for v in xs[i]:
            a = a + v * c
        c = ys[i] = a
    return c + torch.stack(ys).sum()


def grads(f, *args):
    ts = [t(a) for a in args]
    return [g.numpy() for g in torch.autograd.grad(f(*ts), ts)]


def main():
    tsr_eval, tsrc = sys.argv[1:3]
    rng = np.random.default_rng(5)
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
            print("FAIL lowering scan.tsr\n0 passed, 1 failed")
            return 1
        text = p.stdout
        graphs = os.path.join(tmp, "scan.graph")
        with open(graphs, "w") as f:
            f.write(text)
        rt = subprocess.run([tsrc, graphs, "--read-graph"], capture_output=True, text=True, timeout=600)
        check("graph text round trip", rt.returncode == 0 and rt.stdout.strip() == text.strip(), rt.stderr.strip()[:300])

        # The body is lowered once: one scan op, and the step's tanh once, for 5 steps.
        def graph_text(name):
            m = re.search(r"^graph @" + re.escape(name) + r"\(.*?^}$", text, re.M | re.S)
            return m.group(0) if m else ""
        for name in (["unrolled"] if NEGATIVE else ["rnn", "rnn_reverse", "rnn_grad"]):
            g = graph_text(name)
            scans, tanhs = len(re.findall(r" = scan ", g)), len(re.findall(r" = tanh ", g))
            # The gradient: the forward scan and the backward one, which reads tanh's stored result.
            want_scans = 2 if name == "rnn_grad" else 1
            check(f"body lowered once: {name}", scans == want_scans and tanhs == 1, f"{scans} scan ops, {tanhs} tanh ops")

        # checkpoint(f) as the body: the forward scan of the gradient stores the carry alone
        # (results: the carry, the ys, the stored carries), where the plain body also stores
        # residuals (the negative control applies the check to the plain one).
        for name in (["rnn_grad"] if NEGATIVE else ["rnn_ckpt_grad"]):
            first = re.search(r"^  (%\d+(?:, %\d+)*) = scan ", graph_text(name), re.M)
            count = len(first.group(1).split(", ")) if first else 0
            check(f"checkpointed body stores only the carries: {name}", count == 3, f"the forward scan has {count} results")

        n = 0

        def run(graph, *inputs, compiled=False):
            nonlocal n
            args = []
            for v in inputs:
                n += 1
                path = os.path.join(tmp, f"in{n}.npy")
                np.save(path, v)
                args += ["--in", path]
            out = os.path.join(tmp, f"out{n}")
            os.makedirs(out)
            env = dict(os.environ)
            env.pop("TSR_EXECUTOR", None)
            if compiled:
                env["TSR_EXECUTOR"] = "compiled"
                env["TSR_DEVICE"] = "cpu"
            q = subprocess.run([tsr_eval, graphs, "--graph", graph, *args, "--out-dir", out], capture_output=True, text=True,
                               timeout=600, env=env)
            if q.returncode != 0:
                raise RuntimeError(f"tsr-eval {graph}: {q.stderr.strip()[-2000:]}")
            if compiled:
                launches = re.search(r"^compiled: (\d+) launches", q.stderr, re.M)
                scans = re.search(r"^compiled scans: (\d+)", q.stderr, re.M)
                if not launches or int(launches.group(1)) == 0 or not scans or int(scans.group(1)) == 0:
                    raise RuntimeError(f"{graph}: the compiled executor did not run the scan compiled: {q.stderr.strip()[-500:]}")
            files = sorted((f for f in os.listdir(out) if f.endswith(".npy")), key=lambda f: int(f[3:-4]))
            return [np.load(os.path.join(out, f)) for f in files]

        def compare(name, graph, inputs, want, tol=1e-12):
            for compiled in (False, True):
                label = f"{name} ({'compiled' if compiled else 'evaluator'})"
                try:
                    got = run(graph, *inputs, compiled=compiled)
                except RuntimeError as e:
                    check(label, False, str(e)[:500])
                    continue
                if len(got) != len(want):
                    check(label, False, f"{len(got)} outputs for {len(want)}")
                    continue
                errs = [rel(g, w) for g, w in zip(got, want)]
                check(label, max(errs) < tol, "relative errors " + ", ".join(f"{e:.1e}" for e in errs))

        w, h, xs = normal(4, 4) * 0.5, normal(4), normal(5, 4)
        c, ys = rnn(torch.tensor(w), torch.tensor(h), torch.tensor(xs))
        compare("values rnn", "rnn", (w, h, xs), [c.numpy(), ys.numpy()])
        want = grads(lambda w, h, xs: (lambda c, ys: (c * c).sum() + (ys * ys).sum())(*rnn(w, h, xs)), w, h, xs)
        compare("gradients rnn", "rnn_grad", (w, h, xs), want)
        compare("gradients rnn, checkpointed body", "rnn_ckpt_grad", (w, h, xs), want)

        c, ys = rnn(torch.tensor(w), torch.tensor(h), torch.tensor(xs), reverse=True, y_is_carry=True)
        compare("values reverse", "rnn_reverse", (w, h, xs), [c.numpy(), ys.numpy()])
        want = grads(lambda w, h, xs: (lambda c, ys: c.sum() + (ys * xs).sum())(*rnn(w, h, xs, reverse=True, y_is_carry=True)), w, h, xs)
        compare("gradients reverse", "rnn_reverse_grad", (w, h, xs), want)

        h3, s, a, b = normal(3), normal(), normal(6, 3), normal(6, 3)
        (hc, sc), (yh, ysum) = tree(*map(torch.tensor, (h3, s, a, b)))
        compare("values pytree carry and xs", "tree", (h3, s, a, b), [hc.numpy(), sc.numpy(), yh.numpy(), ysum.numpy()])

        def tree_loss(h, s, a, b):
            (hc, sc), (yh, ysum) = tree(h, s, a, b)
            return sc + hc.sum() + (yh * yh).sum() + ysum.sum()
        compare("gradients pytree carry and xs", "tree_grad", (h3, s, a, b), grads(tree_loss, h3, s, a, b))

        m, v = normal(3, 3) * 0.4, normal(3)
        c, ys = powers(torch.tensor(m), torch.tensor(v))
        compare("values length without xs", "powers", (m, v), [c.numpy(), ys.numpy()])
        want = grads(lambda m, v: (lambda c, ys: (c * c).sum() + ys.sum())(*powers(m, v)), m, v)
        compare("gradients length without xs", "powers_grad", (m, v), want)

        N = 3
        hs, xss = normal(N, 4), normal(N, 5, 4)
        outs = [rnn(torch.tensor(w), torch.tensor(hs[i]), torch.tensor(xss[i])) for i in range(N)]
        compare("vmap of scan", "rnn_batched", (w, hs, xss), [np.stack([o[0].numpy() for o in outs]), np.stack([o[1].numpy() for o in outs])])

        dw, dh = normal(4, 4), normal(4)
        _, tangents = torch.autograd.functional.jvp(lambda w, h: rnn(w, h, torch.tensor(xs)), (torch.tensor(w), torch.tensor(h)),
                                                    (torch.tensor(dw), torch.tensor(dh)))
        compare("jvp of scan", "rnn_jvp", (w, h, xs, dw, dh), [tangents[0].numpy(), tangents[1].numpy()])

        w1, b1, w2, x = normal(3, 8, 16) * 0.3, normal(3, 16) * 0.1, normal(3, 16, 8) * 0.3, normal(2, 8)
        y, sums = stack(*map(torch.tensor, (w1, b1, w2, x)))
        compare("values layer stack", "stack", (w1, b1, w2, x), [y.numpy(), sums.numpy()])
        want = grads(lambda w1, b1, w2, x: (lambda y, s: (y * y).sum() + s.sum())(*stack(w1, b1, w2, x)), w1, b1, w2, x)
        compare("gradients layer stack", "stack_grad", (w1, b1, w2, x), want)

        xs3 = normal(3, 4) * 0.3
        want = grads(nested_loss, xs3)
        compare("nested scan and its gradient", "nested", (xs3,), [nested_loss(torch.tensor(xs3)).detach().numpy(), want[0]])
        xss3 = normal(2, 3, 4) * 0.3
        compare("vmap of the gradient of a nested scan", "nested_batched_grad", (xss3,), [np.stack([grads(nested_loss, x)[0] for x in xss3])])

    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
