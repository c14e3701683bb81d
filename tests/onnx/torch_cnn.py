#!/usr/bin/env python3
"""A CNN exported from PyTorch by torch.onnx.export, imported by onnx.load (ctest onnx_torch_cnn;
issue 19's acceptance model with batch norm and grouped convolution).

  torch_cnn.py TSR [--negative]

The model: conv 3x3 (padding 1) -> batch norm -> relu -> max pool 2 -> grouped conv (groups 4,
stride 2) -> batch norm -> relu -> avg pool 3 (stride 1, padding 1) -> flatten -> linear, in eval
mode with random batch-norm statistics (PyTorch's exporter folds each batch norm into its conv,
and writes the padded average pool as Pad + AveragePool). A generated program loads it with
`onnx.load(..., split_params=True)` and computes the output and value_and_grad of sum(y * r)
with respect to the input and to every parameter; they must match PyTorch's output and
torch.autograd's gradients of the input and of the linear layer's weight (relative error 1e-5 in
f32; measured about 1e-7; the bias's gradient, the sum of r whatever the model, is no check). The import must use Graph IR's conv, max_pool and avg_pool ops
(checked in `tsrc --emit=graph`).

--negative is the control: PyTorch's second batch norm gets a different variance after the
export, so the model Tessera runs is not the one PyTorch evaluates: all three comparisons must
fail.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from testlib import skip, summary  # noqa: E402
from torch_python import reexec_with_torch  # noqa: E402

reexec_with_torch("onnx_torch_cnn")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

try:
    import onnx  # noqa: F401,E402
except ImportError as e:
    skip("onnx_torch_cnn", f"the onnx Python package is missing ({e}; Debian: python3-onnx)")


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=4)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.bn1(self.c1(x))), 2)
        x = F.avg_pool2d(torch.relu(self.bn2(self.c2(x))), 3, stride=1, padding=1)
        return self.fc(x.flatten(1))


PROGRAM = '''def main():
    apply, params = onnx.load("cnn.onnx", split_params=True)
    d = load("in.npz")
    x = d["x"]
    r = d["r"]
    loss, grads = value_and_grad(lambda p, a: sum(apply(p, a) * r), argnums=(0, 1))(params, x)
    res = {"y": apply(params, x), "g.x": grads[1]}
    for name, g in grads[0].items():
        res["g." + name] = g
    save("out.npz", res)
    print(f"torch_cnn program: loss {item(loss):.6f}")
'''


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)) if a.shape == b.shape else float("inf")


def main():
    tsr = os.path.abspath(sys.argv[1])
    negative = "--negative" in sys.argv
    torch.manual_seed(19)
    model = CNN()
    with torch.no_grad():
        for bn in (model.bn1, model.bn2):
            bn.running_mean.normal_()
            bn.running_var.uniform_(0.5, 1.5)
            bn.weight.normal_()
            bn.bias.normal_()
    model.eval()
    x = torch.randn(2, 3, 16, 16)
    r = torch.randn(2, 5)
    failures, passed = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        torch.onnx.export(model, x, os.path.join(tmp, "cnn.onnx"), opset_version=13, input_names=["x"], output_names=["y"])
        graph = subprocess.run([os.path.join(os.path.dirname(tsr), "..", "tsrc", "tsrc"), "cnn.onnx", "--emit=graph"],
                               cwd=tmp, capture_output=True, text=True, timeout=300)
        for op in ("= conv ", "= max_pool ", "= avg_pool "):
            if op not in graph.stdout:
                failures.append(f"the imported graph has no `{op.strip('= ')}` op:\n{graph.stdout}{graph.stderr}")
        if negative:
            with torch.no_grad():
                model.bn2.running_var.mul_(1.5)
        xs = x.clone().requires_grad_()
        y = model(xs)
        (y * r).sum().backward()
        np.savez(os.path.join(tmp, "in.npz"), x=x.numpy(), r=r.numpy())
        with open(os.path.join(tmp, "cnn.tsr"), "w") as f:
            f.write(PROGRAM)
        p = subprocess.run([tsr, "run", "cnn.tsr", "--device", "cpu"], cwd=tmp, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            print(f"FAIL: tsr run cnn.tsr: exit {p.returncode}\n{p.stdout}{p.stderr}")
            return 1
        print(p.stdout, end="")
        ours = dict(np.load(os.path.join(tmp, "out.npz")))
    pairs = [("output", ours["y"], y.detach()), ("grad x", ours["g.x"], xs.grad),
             ("grad fc.weight", ours["g.fc.weight"], model.fc.weight.grad)]
    for name, a, b in pairs:
        e = rel(a, b)
        ok = e <= 1e-5
        passed += ok
        if not ok:
            failures.append(f"{name} differs: relative error {e:.3e} > 1e-05")
        print(f"{'ok  ' if ok else 'FAIL'} {name}: relative error {e:.2e}")
    for f in failures:
        print("FAIL: " + f)
    return summary(passed, len(failures), minimum=len(pairs))


if __name__ == "__main__":
    sys.exit(main())
