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
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from testlib import skip, summary  # noqa: E402
from torch_python import reexec_with_torch  # noqa: E402

reexec_with_torch("onnx_torch_cnn")

from torch_models import compare, imported_graph, run_program  # noqa: E402

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
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        torch.onnx.export(model, x, os.path.join(tmp, "cnn.onnx"), opset_version=13, input_names=["x"], output_names=["y"])
        graph_out, graph_err = imported_graph(tsr, tmp, "cnn.onnx")
        for op in ("= conv ", "= max_pool ", "= avg_pool "):
            if op not in graph_out:
                failures.append(f"the imported graph has no `{op.strip('= ')}` op:\n{graph_out}{graph_err}")
        if negative:
            with torch.no_grad():
                model.bn2.running_var.mul_(1.5)
        xs = x.clone().requires_grad_()
        y = model(xs)
        (y * r).sum().backward()
        ours = run_program(tsr, tmp, "cnn.onnx", "torch_cnn", x, r)
        if ours is None:
            return 1
    pairs = [("output", ours["y"], y.detach()), ("grad x", ours["g.x"], xs.grad),
             ("grad fc.weight", ours["g.fc.weight"], model.fc.weight.grad)]
    passed = compare(pairs, failures)
    for f in failures:
        print("FAIL: " + f)
    return summary(passed, len(failures), minimum=len(pairs))


if __name__ == "__main__":
    sys.exit(main())
