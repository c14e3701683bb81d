#!/usr/bin/env python3
"""A transformer block exported from PyTorch by torch.onnx.export, imported by onnx.load (ctest
onnx_torch_transformer; issue 19's second acceptance model, through nn.MultiheadAttention).

  torch_transformer.py TSR [--negative]

The model: a pre-norm block, x + MultiheadAttention(LayerNorm(x)) (4 heads, batch-first, self
attention), then x + Linear(GELU(Linear(LayerNorm(x)))), in eval mode, with random layer-norm
parameters (PyTorch's exporter would merge equal initializers). A generated program loads it with
`onnx.load(..., split_params=True)` and computes the output and value_and_grad of sum(y * r) with
respect to the input and to every parameter; the output and the gradients of the input, of the
attention's input projection (exported transposed as a MatMul's weight), of its output projection
and of the first layer norm's weight must match PyTorch's and torch.autograd's (relative error
1e-5 in f32). The imported graph must hold the attention's softmax and matmuls (`tsrc
--emit=graph`).

--negative is the control: PyTorch's attention gets a different input projection after the export,
so the model Tessera runs is not the one PyTorch evaluates: all five comparisons must fail.
"""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from testlib import skip, summary  # noqa: E402
from torch_python import reexec_with_torch  # noqa: E402

reexec_with_torch("onnx_torch_transformer")

from torch_models import compare, imported_graph, run_program  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

try:
    import onnx  # noqa: F401,E402
except ImportError as e:
    skip("onnx_torch_transformer", f"the onnx Python package is missing ({e}; Debian: python3-onnx)")


class Block(nn.Module):
    def __init__(self, d=16, heads=4):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        y = self.ln1(x)
        a, _ = self.attn(y, y, y, need_weights=False)
        x = x + a
        return x + self.mlp(self.ln2(x))


def main():
    tsr = os.path.abspath(sys.argv[1])
    negative = "--negative" in sys.argv
    torch.manual_seed(19)
    model = Block()
    with torch.no_grad():
        for ln in (model.ln1, model.ln2):
            ln.weight.normal_(1.0, 0.2)
            ln.bias.normal_(0.0, 0.2)
        model.attn.out_proj.bias.normal_(0.0, 0.2)
    model.eval()
    x = torch.randn(2, 5, 16)
    r = torch.randn(2, 5, 16)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        torch.onnx.export(model, x, os.path.join(tmp, "block.onnx"), opset_version=14, input_names=["x"], output_names=["y"])
        exported = onnx.load(os.path.join(tmp, "block.onnx")).graph
        inits = {t.name: tuple(t.dims) for t in exported.initializer}
        # The exporter writes the input projection transposed, as the weight of the first MatMul.
        in_proj = next(n.input[1] for n in exported.node if n.op_type == "MatMul" and inits.get(n.input[1]) == (16, 48))
        graph_out, graph_err = imported_graph(tsr, tmp, "block.onnx")
        for op in ("= softmax", "= matmul ", "= erf "):
            if op not in graph_out and not (op == "= softmax" and "= reduce_max " in graph_out):
                failures.append(f"the imported graph has no `{op.strip('= ')}` op:\n{graph_out[-2000:]}{graph_err}")
        if negative:
            with torch.no_grad():
                model.attn.in_proj_weight.mul_(1.1)
        xs = x.clone().requires_grad_()
        y = model(xs)
        (y * r).sum().backward()
        ours = run_program(tsr, tmp, "block.onnx", "torch_transformer", x, r)
        if ours is None:
            return 1
    pairs = [("output", ours["y"], y.detach()), ("grad x", ours["g.x"], xs.grad),
             ("grad attn.in_proj_weight", ours["g." + in_proj].T, model.attn.in_proj_weight.grad),
             ("grad attn.out_proj.weight", ours["g.attn.out_proj.weight"], model.attn.out_proj.weight.grad),
             ("grad ln1.weight", ours["g.ln1.weight"], model.ln1.weight.grad)]
    passed = compare(pairs, failures)
    for f in failures:
        print("FAIL: " + f)
    return summary(passed, len(failures), minimum=len(pairs))


if __name__ == "__main__":
    sys.exit(main())
