#!/usr/bin/env python3
"""onnx.load in .tsr programs against PyTorch and ONNX's reference outputs (ctest onnx_language;
spec 15, issue 19).

  language_torch.py TSR [--negative] [--device cpu|cuda]

1. A small MLP written with ONNX's helper (MatMul, Add, Tanh, Softmax; a symbolic batch "N"; two
   outputs) is loaded by a .tsr program three ways: `f = onnx.load(...)` called from host code and
   from a @jit function, and `apply, params = onnx.load(..., split_params=True)` with
   grad(lambda p, x: mean(apply(p, x)[0] ** 2))(params, x). Its outputs and the gradient of every
   initializer are compared with the same model in PyTorch (float32, torch.autograd), to a
   relative error (the difference's norm over the reference's) of 1e-5.
2. Models of ONNX's backend test data (Debian's libonnx-testdata, the pytorch-converted set) are
   loaded by absolute path and run on their test_data_set_0 input; the output must match the
   data set's output_0.pb (computed by the exporter's reference; Embedding's input is int64 token
   ids) within ONNX's backend tolerances
   (rtol 1e-3, atol 1e-7; as tools/onnx/backend_test.sh).
(onnx.reference, ONNX's Python evaluator, is newer than the onnx 1.12 of this machine; the
backend data's outputs and PyTorch are the oracles.)

--negative is the control: Tessera's copy of the MLP has one column of W2 changed by 0.05 and the
backend models get their input times 1.1 (other token ids for Embedding), so every comparison must fail ("FAIL: ... differ").
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from torch_python import reexec_with_torch  # noqa: E402
from testlib import skip  # noqa: E402

reexec_with_torch("onnx_language")

import numpy as np  # noqa: E402
import torch  # noqa: E402

try:
    import onnx  # noqa: E402
    from onnx import TensorProto, helper, numpy_helper  # noqa: E402
except ImportError as e:
    skip("onnx_language", f"the onnx Python package is missing ({e}; Debian: python3-onnx)")

DATA = "/usr/share/libonnx-testdata/data/pytorch-converted"
BACKEND = ["test_Linear", "test_Conv2d", "test_BatchNorm2d_eval", "test_Softmax", "test_GLU", "test_PReLU_1d", "test_Embedding"]

PROGRAM = '''f = onnx.load("mlp.onnx")

@jit
def doubled(x: Tensor["B", 4, f32]) -> Tensor["B", 3, f32]:
    y, p = f(x)
    return p * 2.0

def main():
    x = load("x.npy")
    y, p = f(x)
    apply, params = onnx.load("mlp.onnx", split_params=True)
    g = grad(lambda q, x: mean(apply(q, x)[0] ** 2))(params, x)
    save("out.npz", {"y": y, "p": p, "doubled": doubled(x), "W1": g["W1"], "b1": g["b1"], "W2": g["W2"], "b2": g["b2"]})
'''


def mlp_model(path, params):
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h0"], name="mm1"),
             helper.make_node("Add", ["h0", "b1"], ["h1"], name="add1"),
             helper.make_node("Tanh", ["h1"], ["h2"], name="tanh"),
             helper.make_node("MatMul", ["h2", "W2"], ["h3"], name="mm2"),
             helper.make_node("Add", ["h3", "b2"], ["y"], name="add2"),
             helper.make_node("Softmax", ["y"], ["p"], name="softmax", axis=-1)]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3]),
                           helper.make_tensor_value_info("p", TensorProto.FLOAT, ["N", 3])],
                          [numpy_helper.from_array(v, k) for k, v in params.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    onnx.save(m, path)


def rel(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


DEVICE = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cpu"


def run(tsr, work, program):
    with open(os.path.join(work, "prog.tsr"), "w") as f:
        f.write(program)
    r = subprocess.run([tsr, "run", "prog.tsr", "--device", DEVICE], cwd=work, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print(f"FAIL: tsr run exited {r.returncode}:\n{r.stdout}{r.stderr}")
        return None
    return dict(np.load(os.path.join(work, "out.npz")))


def main():
    tsr = sys.argv[1]
    negative = "--negative" in sys.argv[2:]
    failed = passed = 0
    rng = np.random.default_rng(19)
    params = {"W1": rng.standard_normal((4, 16)).astype(np.float32) * 0.5, "b1": rng.standard_normal(16).astype(np.float32) * 0.1,
              "W2": rng.standard_normal((16, 3)).astype(np.float32) * 0.5, "b2": rng.standard_normal(3).astype(np.float32) * 0.1}
    x = rng.standard_normal((5, 4)).astype(np.float32)
    with tempfile.TemporaryDirectory() as work:
        mine = dict(params)
        if negative:
            mine["W2"] = mine["W2"].copy()
            mine["W2"][:, 0] += np.float32(0.05)  # not a shift of every logit, which softmax ignores
        mlp_model(os.path.join(work, "mlp.onnx"), mine)
        np.save(os.path.join(work, "x.npy"), x)
        out = run(tsr, work, PROGRAM)
        # PyTorch: the same model on the original weights.
        tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
        tx = torch.tensor(x)
        y = torch.tanh(tx @ tp["W1"] + tp["b1"]) @ tp["W2"] + tp["b2"]
        p = torch.softmax(y, dim=-1)
        (y ** 2).mean().backward()
        want = {"y": y.detach().numpy(), "p": p.detach().numpy(), "doubled": 2 * p.detach().numpy()}
        want.update({k: tp[k].grad.numpy() for k in params})
        if out is None:
            failed += len(want)
        else:
            for k, w in want.items():
                got = out.get(k)
                e = rel(got, w) if got is not None and got.shape == w.shape else float("inf")
                if e <= 1e-5:
                    passed += 1
                    print(f"PASS mlp {k}: rel {e:.1e}")
                else:
                    failed += 1
                    print(f"FAIL: mlp {k} differ: rel {e:.3g} (shape {None if got is None else got.shape} vs {w.shape})")

        # ONNX's backend test models, against their reference outputs.
        if not os.path.isdir(DATA):
            skip("onnx_language", f"{DATA} is missing (Debian: libonnx-testdata)")
        for name in BACKEND:
            model = os.path.join(DATA, name, "model.onnx")
            ds = os.path.join(DATA, name, "test_data_set_0")
            inp = numpy_helper.to_array(onnx.load_tensor(os.path.join(ds, "input_0.pb")))
            ref = numpy_helper.to_array(onnx.load_tensor(os.path.join(ds, "output_0.pb")))
            if negative:
                # Embedding's token ids (int64, within its vocabulary of 4) change to other ids.
                inp = inp * np.asarray(1.1, inp.dtype) if inp.dtype.kind == "f" else (inp + 1) % 4
            np.save(os.path.join(work, "x.npy"), inp)
            out = run(tsr, work, f'm = onnx.load("{model}")\n\ndef main():\n    save("out.npz", {{"y": m(load("x.npy"))}})\n')
            got = None if out is None else out["y"]
            if got is not None and got.shape == ref.shape and got.dtype == ref.dtype and np.allclose(got, ref, rtol=1e-3, atol=1e-7):
                passed += 1
                print(f"PASS {name}: max abs diff {np.max(np.abs(got - ref)):.1e}")
            else:
                failed += 1
                detail = "no output" if got is None else f"shape {got.shape} {got.dtype} vs {ref.shape} {ref.dtype}, max abs diff " + (
                    f"{np.max(np.abs(got.astype(np.float64) - ref)):.3g}" if got.shape == ref.shape else "-")
                print(f"FAIL: {name} outputs differ: {detail}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
