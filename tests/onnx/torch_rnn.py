#!/usr/bin/env python3
"""Recurrent layers exported from PyTorch by torch.onnx.export, imported by onnx.load (ctest
onnx_torch_rnn; issue 19's RNN, GRU and LSTM operators, which the importer lowers to Graph IR's
scan region op).

  torch_rnn.py TSR [--negative]

The model: nn.RNN (tanh) -> a bidirectional nn.GRU (PyTorch exports it with
linear_before_reset = 1) -> a 2-layer nn.LSTM -> linear, batch-first, so the ONNX graph has RNN,
GRU and LSTM nodes (forward and bidirectional). A generated program loads it with
`onnx.load(..., split_params=True)` and computes the output and value_and_grad of sum(y * r) with
respect to the input and to every parameter; the output and the gradients of the input and of the
first layer's input weight (both through every recurrence, both directions) and of the linear
weight must match PyTorch's and torch.autograd's (relative error 1e-5 in f32). The import must use scan ops (`tsrc --emit=graph`),
one per direction and layer: 1 + 2 + 2 = 5.

--negative is the control: PyTorch's GRU gets a different recurrent weight after the export, so
the model Tessera runs is not the one PyTorch evaluates: all four comparisons must fail.
"""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from testlib import skip, summary  # noqa: E402
from torch_python import reexec_with_torch  # noqa: E402

reexec_with_torch("onnx_torch_rnn")

from torch_models import compare, imported_graph, run_program  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

try:
    import onnx  # noqa: F401,E402
except ImportError as e:
    skip("onnx_torch_rnn", f"the onnx Python package is missing ({e}; Debian: python3-onnx)")


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(4, 5, batch_first=True)
        self.gru = nn.GRU(5, 6, bidirectional=True, batch_first=True)
        self.lstm = nn.LSTM(12, 7, num_layers=2, batch_first=True)
        self.fc = nn.Linear(7, 3)

    def forward(self, x):
        x, _ = self.rnn(x)
        x, _ = self.gru(x)
        x, _ = self.lstm(x)
        return self.fc(x)


def main():
    tsr = os.path.abspath(sys.argv[1])
    negative = "--negative" in sys.argv
    torch.manual_seed(19)
    model = Recurrent().eval()
    x = torch.randn(2, 6, 4)
    r = torch.randn(2, 6, 3)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        torch.onnx.export(model, x, os.path.join(tmp, "rnn.onnx"), opset_version=14, input_names=["x"], output_names=["y"])
        exported = onnx.load(os.path.join(tmp, "rnn.onnx")).graph
        ops = sorted({n.op_type for n in exported.node})
        # PyTorch's exporter renames the weights: the linear layer's is the MatMul's (transposed),
        # the RNN's input weight is its node's W ([1, hidden, input], as PyTorch's weight_ih_l0).
        fc_w = next(n.input[1] for n in exported.node if n.op_type == "MatMul")
        rnn_w = next(n.input[1] for n in exported.node if n.op_type == "RNN")
        for op in ("RNN", "GRU", "LSTM"):
            if op not in ops:
                failures.append(f"the exported model has no {op} node (it has {ops})")
        graph_out, graph_err = imported_graph(tsr, tmp, "rnn.onnx")
        scans = graph_out.count("= scan ")
        if scans != 5:
            failures.append(f"the imported graph has {scans} scan ops, not 5:\n{graph_out[-2000:]}{graph_err}")
        if negative:
            with torch.no_grad():
                model.gru.weight_hh_l0_reverse.mul_(1.2)
        xs = x.clone().requires_grad_()
        y = model(xs)
        (y * r).sum().backward()
        ours = run_program(tsr, tmp, "rnn.onnx", "torch_rnn", x, r)
        if ours is None:
            return 1
    pairs = [("output", ours["y"], y.detach()), ("grad x", ours["g.x"], xs.grad),
             ("grad fc.weight", ours["g." + fc_w].T, model.fc.weight.grad),
             ("grad rnn.weight_ih_l0", ours["g." + rnn_w][0], model.rnn.weight_ih_l0.grad)]
    passed = compare(pairs, failures)
    for f in failures:
        print("FAIL: " + f)
    return summary(passed, len(failures), minimum=len(pairs))


if __name__ == "__main__":
    sys.exit(main())
