#!/usr/bin/env python3
"""The options of ONNX's RNN, GRU and LSTM that PyTorch's exporter does not write, imported by
onnx.load (ctest onnx_recurrent_options): models made with ONNX's helper, their outputs and the
gradients of sum(Y * r) + sum(Y_h * rh) with respect to X and to W, R and the other weights, against
the operators' formulas (ONNX 1.12's onnx/defs/rnn/defs.cc) written as PyTorch loops and
differentiated by torch.autograd (relative error 1e-5, f32).

  recurrent_options.py TSR [--negative]

- lstm: direction reverse, bias, sequence_lens [4, 2, 3] of 4 steps (a second model input, int32:
  masked steps keep the state, Y is 0 there, each row starts at its own last step), initial_h and
  initial_c, peepholes, clip 2.5.
- gru:  bidirectional, layout 1 (batch-major), linear_before_reset 0, activations HardSigmoid
  (alpha 0.3, beta 0.4) / Softsign forward and Sigmoid / Tanh reverse.
- rnn:  forward, Relu, with bias and initial_h.

--negative is the control: PyTorch's formulas use a sequence length one longer for the LSTM, no
reset-gate-first product for the GRU (linear_before_reset 1) and Tanh for the RNN: every
comparison must fail.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from testlib import skip, summary  # noqa: E402
from torch_python import reexec_with_torch  # noqa: E402

reexec_with_torch("onnx_recurrent_options")

import numpy as np  # noqa: E402
import torch  # noqa: E402

try:
    import onnx  # noqa: E402
    from onnx import TensorProto, helper, numpy_helper  # noqa: E402
except ImportError as e:
    skip("onnx_recurrent_options", f"the onnx Python package is missing ({e}; Debian: python3-onnx)")

F = TensorProto.FLOAT
T, B, I, H = 4, 3, 2, 5
NEGATIVE = "--negative" in sys.argv


def model(path, op, xshape, inputs, outputs, inits, extra=(), **attrs):
    node = helper.make_node(op, inputs, list(outputs), **attrs)
    g = helper.make_graph([node], op.lower(), [helper.make_tensor_value_info("X", F, list(xshape))] + list(extra),
                          [helper.make_tensor_value_info(o, F, list(shape)) for o, shape in outputs.items()],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    onnx.checker.check_model(m)
    onnx.save(m, path)


def sig(x):
    return torch.sigmoid(x)


def lstm_ref(p, X):
    W, R, Bb, P, h0, c0 = (p[k][0] for k in ("W", "R", "B", "P", "initial_h", "initial_c"))
    lens = [int(v) + (1 if NEGATIVE else 0) for v in p["lens"]]
    clip = lambda v: v.clamp(-2.5, 2.5)  # noqa: E731
    wb, rb = Bb[:4 * H], Bb[4 * H:]
    Y = [[None] * B for _ in range(T)]
    hs, cs = [], []
    for b in range(B):
        h, c = h0[b], c0[b]
        for t in reversed(range(T)):
            if t >= lens[b]:
                Y[t][b] = torch.zeros(H, dtype=X.dtype)
                continue
            g = X[t, b] @ W.T + h @ R.T + wb + rb
            gi, go, gf, gc = g[:H], g[H:2 * H], g[2 * H:3 * H], g[3 * H:]
            i = sig(clip(gi + P[:H] * c))
            f = sig(clip(gf + P[2 * H:] * c))
            c = f * c + i * torch.tanh(clip(gc))
            o = sig(clip(go + P[H:2 * H] * c))
            h = o * torch.tanh(c)
            Y[t][b] = h
        hs.append(h)
        cs.append(c)
    Yt = torch.stack([torch.stack(r) for r in Y])[:, None]  # [T, 1, B, H]
    return Yt, torch.stack(hs)[None]


def gru_ref(p, X):  # X batch-major [B, T, I]
    W, R, Bb = p["W"], p["R"], p["B"]
    acts = [(lambda v: torch.clamp(v * 0.3 + 0.4, 0, 1), lambda v: v / (1 + v.abs())), (sig, torch.tanh)]
    Ys, hs = [], []
    for d in range(2):
        f, g = acts[d]
        wb, rb = Bb[d][:3 * H], Bb[d][3 * H:]
        h = torch.zeros(B, H, dtype=X.dtype)
        Y = [None] * T
        for t in (range(T) if d == 0 else reversed(range(T))):
            xw = X[:, t] @ W[d].T + wb
            hr = h @ R[d].T
            z = f(xw[:, :H] + hr[:, :H] + rb[:H])
            r = f(xw[:, H:2 * H] + hr[:, H:2 * H] + rb[H:2 * H])
            if NEGATIVE:
                hh = g(xw[:, 2 * H:] + r * (hr[:, 2 * H:] + rb[2 * H:]))
            else:
                hh = g(xw[:, 2 * H:] + (r * h) @ R[d][2 * H:].T + rb[2 * H:])
            h = (1 - z) * hh + z * h
            Y[t] = h
        Ys.append(torch.stack(Y))  # [T, B, H]
        hs.append(h)
    Y = torch.stack(Ys, 1)  # [T, 2, B, H]
    return Y.permute(2, 0, 1, 3), torch.stack(hs, 1)  # [B, T, 2, H], [B, 2, H]


def rnn_ref(p, X):
    W, R, Bb, h = p["W"][0], p["R"][0], p["B"][0], p["initial_h"][0]
    act = torch.tanh if NEGATIVE else torch.relu
    Y = []
    for t in range(T):
        h = act(X[t] @ W.T + h @ R.T + Bb[:H] + Bb[H:])
        Y.append(h)
    return torch.stack(Y)[:, None], h[None]


ONE = '''    apply, params = onnx.load("NAME.onnx", split_params=True)
    x = d["NAME_x"]
    r = d["NAME_r"]
    rh = d["NAME_rh"]
    loss, g = value_and_grad(lambda p, a: sum(apply(p, aEXTRA)[0] * r) + sum(apply(p, aEXTRA)[1] * rh), argnums=(0, 1))(params, x)
    y, yh = apply(params, xEXTRA)
    res["NAME.y"] = y
    res["NAME.yh"] = yh
    res["NAME.gx"] = g[1]
    for k, v in g[0].items():
        res["NAME.g." + k] = v
'''
PROGRAM = ('def main():\n    d = load("in.npz")\n    res = {}\n' + ''.join(ONE.replace("NAME", n).replace("EXTRA", ', d["lens"]' if n == "lstm" else "")
                                                                         for n in ("lstm", "gru", "rnn"))
           + '    save("out.npz", res)\n    print("recurrent_options program: done")\n')


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)) if a.shape == b.shape else float("inf")


def main():
    tsr = os.path.abspath(sys.argv[1])
    rng = np.random.default_rng(19)
    f32 = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731
    lstm = {"W": f32(1, 4 * H, I), "R": f32(1, 4 * H, H), "B": f32(1, 8 * H), "P": f32(1, 3 * H), "initial_h": f32(1, B, H),
            "initial_c": f32(1, B, H)}
    lens = np.array([4, 2, 3], np.int32)
    gru = {"W": f32(2, 3 * H, I), "R": f32(2, 3 * H, H), "B": f32(2, 6 * H)}
    rnn = {"W": f32(1, H, I), "R": f32(1, H, H), "B": f32(1, 2 * H), "initial_h": f32(1, B, H)}
    data = {"lstm_x": f32(T, B, I), "lstm_r": f32(T, 1, B, H), "lstm_rh": f32(1, B, H),
            "gru_x": f32(B, T, I), "gru_r": f32(B, T, 2, H), "gru_rh": f32(B, 2, H),
            "rnn_x": f32(T, B, I), "rnn_r": f32(T, 1, B, H), "rnn_rh": f32(1, B, H)}
    failures, pairs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        model(os.path.join(tmp, "lstm.onnx"), "LSTM", (T, B, I), ["X", "W", "R", "B", "lens", "initial_h", "initial_c", "P"],
              {"Y": (T, 1, B, H), "Y_h": (1, B, H)}, lstm, [helper.make_tensor_value_info("lens", TensorProto.INT32, [B])],
              hidden_size=H, direction="reverse", clip=2.5)
        model(os.path.join(tmp, "gru.onnx"), "GRU", (B, T, I), ["X", "W", "R", "B"], {"Y": (B, T, 2, H), "Y_h": (B, 2, H)}, gru, hidden_size=H,
              direction="bidirectional", layout=1, activations=["HardSigmoid", "Softsign", "Sigmoid", "Tanh"],
              activation_alpha=[0.3], activation_beta=[0.4])
        model(os.path.join(tmp, "rnn.onnx"), "RNN", (T, B, I), ["X", "W", "R", "B", "", "initial_h"], {"Y": (T, 1, B, H), "Y_h": (1, B, H)}, rnn,
              hidden_size=H,
              activations=["Relu"])
        np.savez(os.path.join(tmp, "in.npz"), lens=lens, **data)
        with open(os.path.join(tmp, "ro.tsr"), "w") as f:
            f.write(PROGRAM)
        p = subprocess.run([tsr, "run", "ro.tsr", "--device", "cpu"], cwd=tmp, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            print(f"FAIL: tsr run ro.tsr: exit {p.returncode}\n{p.stdout}{p.stderr}")
            return 1
        print(p.stdout, end="")
        ours = dict(np.load(os.path.join(tmp, "out.npz")))
    for name, weights, ref, names in (("lstm", lstm, lstm_ref, ("W", "R", "P", "initial_c")), ("gru", gru, gru_ref, ("W", "R", "B")),
                                      ("rnn", rnn, rnn_ref, ("W", "R", "initial_h"))):
        ps = {k: torch.tensor(v, requires_grad=True) for k, v in weights.items()}
        if name == "lstm":
            ps["lens"] = lens
        x = torch.tensor(data[name + "_x"], requires_grad=True)
        y, yh = ref(ps, x)
        ((y * torch.tensor(data[name + "_r"])).sum() + (yh * torch.tensor(data[name + "_rh"])).sum()).backward()
        pairs += [(f"{name} Y", ours[name + ".y"], y.detach()), (f"{name} Y_h", ours[name + ".yh"], yh.detach()),
                  (f"{name} grad X", ours[name + ".gx"], x.grad)]
        pairs += [(f"{name} grad {k}", ours[f"{name}.g.{k}"], ps[k].grad) for k in names]
    passed = 0
    for label, a, b in pairs:
        e = rel(a, b)
        ok = e <= 1e-5
        passed += ok
        if not ok:
            failures.append(f"{label} differs: relative error {e:.3e} > 1e-05")
        print(f"{'ok  ' if ok else 'FAIL'} {label}: relative error {e:.2e}")
    for f in failures:
        print("FAIL: " + f)
    return summary(passed, len(failures), minimum=len(pairs))


if __name__ == "__main__":
    sys.exit(main())
