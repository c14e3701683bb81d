#!/usr/bin/env python3
"""Gradients of Graph IR ops and of the stdlib's `nn` functions, against torch.autograd and
against central finite differences of the program's own forward pass, all in f64.

    test_grad.py TSR_EVAL TSRC

For each case below the driver writes, into one generated program, a loss
`f_i(inputs..., w) = sum(EXPR * w)` (w a fixed random weighting of EXPR's elements, so that every
element's derivative matters), its gradient `d_i = value_and_grad(f_i, argnums=(the float
inputs))`, a directional difference quotient `fd_i(inputs..., w, directions...) =
(f_i(x + h v) - f_i(x - h v)) / 2h`, and the directional derivative by forward mode `j_i`. `tsrc --emit=graph` lowers it (so the gradient goes through
lowering and ir/autodiff exactly as user code does) and `tsr-eval` runs the graphs. Checks:
- torch: every gradient element equals torch.autograd's for the same function (rtol 1e-9,
  atol 1e-10, f64), and the value equals torch's;
- finite differences: <grad, v> equals the difference quotient for 3 random directions v
  (h = 1e-5, relative error 1e-6: central differences are accurate to O(h^2) and f64 rounding
  adds about 1e-16 |f| / h);
- forward mode: `j_i = jvp(f_i, inputs, v)` equals <grad, v> (relative 1e-9), which checks every
  op's jvp rule against its vjp rule.
Cases with `torch=None` (random draws, whose bits torch cannot reproduce) check finite
differences and a case-specific rule. Prints the largest errors per case; ends with `N passed,
N failed`.

PyTorch and NumPy are needed: the script re-runs itself under a Python that has them
(TSR_TORCH_PYTHON, /usr/bin/python3, the python3s on PATH), and prints SKIP and passes when there
is none.
"""
import concurrent.futures
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_python import reexec_with_torch  # noqa: E402
from testlib import summary  # noqa: E402


if __name__ == "__main__":
    reexec_with_torch("autodiff_grad")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(1)
H = 1e-5

# ---- cases ---------------------------------------------------------------------------------------
# (name, inputs, tsr expression, torch function)
# inputs: (name, shape, kind) with kind "n" (standard normal), "p" (positive: 0.5 + |normal|),
#   "u" (uniform in (-0.9, 0.9)), "i<N>" (integer indices in [0, N), i64), "key" (a random key).
#   Float inputs are differentiated; the others are not.
# torch function: of the inputs as torch tensors (None for keys), returning EXPR's value.
# options (optional): "torch_tol" (rtol, atol) where the function itself differs from torch's,
#   "fd_rtol" where rounding limits the difference quotient, "fd": False where it does not apply,
#   "jvp_rtol" where tangents and cotangents are rounded differently.

def _gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def _rope(x, c, s):
    half = x.shape[-1] // 2
    return x * c + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * s


def _grad_of(f, x):
    """torch's gradient of f at x, itself differentiable (create_graph) where x requires grad."""
    a = x if x.requires_grad else x.detach().requires_grad_()
    return torch.autograd.grad(f(a), a, create_graph=True)[0]


def _sdpa(q, k, v, causal=False):
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v


CASES = [
    # -- unary --
    ("neg", [("x", (3, 4), "n")], "-x", lambda x: -x),
    ("abs", [("x", (3, 4), "n")], "abs(x)", torch.abs),
    ("exp", [("x", (3, 4), "n")], "exp(x)", torch.exp),
    ("log", [("x", (3, 4), "p")], "log(x)", torch.log),
    ("log1p", [("x", (3, 4), "p")], "log1p(x)", torch.log1p),
    ("expm1", [("x", (3, 4), "n")], "expm1(x)", torch.expm1),
    ("sqrt", [("x", (3, 4), "p")], "sqrt(x)", torch.sqrt),
    ("rsqrt", [("x", (3, 4), "p")], "rsqrt(x)", torch.rsqrt),
    ("tanh", [("x", (3, 4), "n")], "tanh(x)", torch.tanh),
    ("sigmoid", [("x", (3, 4), "n")], "sigmoid(x)", torch.sigmoid),
    ("relu", [("x", (3, 4), "n")], "relu(x)", torch.relu),
    ("gelu", [("x", (3, 4), "n")], "gelu(x)", F.gelu),
    ("gelu_tanh", [("x", (3, 4), "n")], 'gelu(x, approximate="tanh")', _gelu_tanh),
    ("silu", [("x", (3, 4), "n")], "silu(x)", F.silu),
    ("sin", [("x", (3, 4), "n")], "sin(x)", torch.sin),
    ("cos", [("x", (3, 4), "n")], "cos(x)", torch.cos),
    ("erf", [("x", (3, 4), "n")], "erf(x)", torch.erf),
    ("exp2", [("x", (3, 4), "n")], "exp2(x)", torch.exp2),
    ("log2", [("x", (3, 4), "p")], "log2(x)", torch.log2),
    ("softplus", [("x", (3, 4), "n")], "softplus(x)", F.softplus),
    ("softplus_beta", [("x", (3, 4), "n")], "softplus(x * 4.0, beta=2.0, threshold=5.0)",
     lambda x: F.softplus(x * 4.0, beta=2.0, threshold=5.0)),
    # Through f32, whose rounding (6e-8 relative) is large against h: a looser difference quotient;
    # tangents and cotangents are rounded to f32 at different points: a looser jvp.
    ("cast", [("x", (3, 4), "n")], "cast(cast(x, f32), f64)", lambda x: x.float().double(), {"fd_rtol": 3e-2, "jvp_rtol": 1e-6}),
    ("astype", [("x", (3, 4), "n")], "x.astype(f32).astype(f64)", lambda x: x.float().double(), {"fd_rtol": 3e-2, "jvp_rtol": 1e-6}),
    ("cast_like", [("x", (3, 4), "n"), ("y", (4,), "n")], "cast_like(x, y) * y", lambda x, y: x * y),
    # -- binary, with broadcasting on both sides --
    ("add", [("x", (3, 4), "n"), ("y", (4,), "n")], "x + y", lambda x, y: x + y),
    ("sub", [("x", (3, 1), "n"), ("y", (1, 4), "n")], "x - y", lambda x, y: x - y),
    ("mul", [("x", (2, 3, 4), "n"), ("y", (3, 1), "n")], "x * y", lambda x, y: x * y),
    ("div", [("x", (3, 4), "n"), ("y", (4,), "p")], "x / y", lambda x, y: x / y),
    ("pow", [("x", (3, 4), "p"), ("y", (3, 4), "n")], "x ** y", lambda x, y: x ** y),
    ("pow_const", [("x", (3, 4), "n")], "x ** 3", lambda x: x ** 3),
    ("maximum", [("x", (3, 4), "n"), ("y", (4,), "n")], "maximum(x, y)", torch.maximum),
    ("minimum", [("x", (3, 4), "n"), ("y", (3, 4), "n")], "minimum(x, y)", torch.minimum),
    ("mod", [("x", (3, 4), "n"), ("y", (3, 4), "p")], "x % y", torch.remainder),
    ("where", [("x", (3, 4), "n"), ("y", (4,), "n")], "where(x > 0.0, x * y, y)", lambda x, y: torch.where(x > 0, x * y, y)),
    ("clamp", [("x", (3, 4), "n")], "clamp(x, -0.5, 0.5)", lambda x: torch.clamp(x, -0.5, 0.5)),
    # -- reductions --
    ("sum_axis", [("x", (3, 4, 5), "n")], "sum(x, axis=1)", lambda x: x.sum(1)),
    ("sum_keep", [("x", (3, 4), "n")], "sum(x, axis=-1, keepdims=True)", lambda x: x.sum(-1, keepdim=True)),
    ("mean", [("x", (3, 4), "n")], "mean(x, axis=0)", lambda x: x.mean(0)),
    ("max", [("x", (3, 4), "n")], "max(x, axis=1)", lambda x: x.amax(1)),
    ("min_all", [("x", (3, 4), "n")], "min(x)", lambda x: x.amin()),
    ("prod", [("x", (3, 4), "n")], "prod(x, axis=1)", lambda x: x.prod(1)),
    ("var", [("x", (3, 5), "n")], "var(x, axis=1)", lambda x: x.var(1, unbiased=False)),
    ("logsumexp", [("x", (3, 5), "n")], "logsumexp(x, axis=-1)", lambda x: torch.logsumexp(x, -1)),
    ("sum_method", [("x", (3, 4), "n")], "x.sum(axis=1)", lambda x: x.sum(1)),
    ("max_method", [("x", (3, 4), "n")], "x.max(axis=0, keepdims=True)", lambda x: x.amax(0, keepdim=True)),
    ("min_method", [("x", (3, 4), "n")], "x.min()", lambda x: x.amin()),
    ("prod_method", [("x", (3, 4), "n")], "x.prod(axis=1)", lambda x: x.prod(1)),
    # -- matmul: matrices, batches that broadcast, vectors --
    ("matmul", [("a", (3, 4), "n"), ("b", (4, 5), "n")], "a @ b", lambda a, b: a @ b),
    ("matmul_batch", [("a", (2, 3, 4), "n"), ("b", (4, 5), "n")], "a @ b", lambda a, b: a @ b),
    ("matmul_bcast", [("a", (2, 1, 3, 4), "n"), ("b", (3, 4, 2), "n")], "a @ b", lambda a, b: a @ b),
    ("matvec", [("a", (3, 4), "n"), ("b", (4,), "n")], "a @ b", lambda a, b: a @ b),
    ("vecmat", [("a", (4,), "n"), ("b", (4, 5), "n")], "a @ b", lambda a, b: a @ b),
    ("dot", [("a", (4,), "n"), ("b", (4,), "n")], "a @ b", lambda a, b: a @ b),
    ("matmul_call", [("a", (2, 3, 4), "n"), ("b", (4, 5), "n")], "matmul(a, b)", lambda a, b: a @ b),
    # -- layout --
    ("reshape", [("x", (3, 4), "n")], "reshape(x, (2, 6))", lambda x: x.reshape(2, 6)),
    ("transpose", [("x", (2, 3, 4), "n")], "transpose(x, (2, 0, 1))", lambda x: x.permute(2, 0, 1)),
    ("broadcast_to", [("x", (3, 1), "n")], "broadcast_to(x, (2, 3, 4))", lambda x: x.expand(2, 3, 4)),
    ("expand", [("x", (3, 1), "n")], "expand(x, (2, -1, 4))", lambda x: x.expand(2, -1, 4)),
    ("reshape_method", [("x", (3, 4), "n")], "x.reshape(2, 6) + x.reshape((6, 2)).reshape(2, 6)", lambda x: x.reshape(2, 6) * 2),
    ("transpose_method", [("x", (2, 3, 4), "n")], "x.transpose(2, 0, 1)", lambda x: x.permute(2, 0, 1)),
    ("squeeze_method", [("x", (3, 1, 4), "n")], "x.squeeze(1).unsqueeze(0)", lambda x: x.squeeze(1).unsqueeze(0)),
    ("slice", [("x", (5, 6), "n")], "x[1:4, 2:]", lambda x: x[1:4, 2:]),
    ("slice_step", [("x", (7, 6), "n")], "x[1::2, ::3]", lambda x: x[1::2, ::3]),
    ("reverse", [("x", (4, 3), "n")], "x[::-1]", lambda x: x.flip(0)),
    ("index", [("x", (4, 3), "n")], "x[2]", lambda x: x[2]),
    ("concat", [("x", (2, 3), "n"), ("y", (4, 3), "n")], "concat((x, y), axis=0)", lambda x, y: torch.cat([x, y], 0)),
    ("stack", [("x", (2, 3), "n"), ("y", (2, 3), "n")], "stack((x, y), axis=1)", lambda x, y: torch.stack([x, y], 1)),
    ("split", [("x", (6, 2), "n")], "split(x, 3, axis=0)[1] * 2.0", lambda x: torch.split(x, 2, 0)[1] * 2),
    ("squeeze", [("x", (3, 1, 4), "n")], "unsqueeze(squeeze(x, axis=1), 0)", lambda x: x.squeeze(1).unsqueeze(0)),
    ("gather", [("x", (4, 5), "n"), ("i", (4, 3), "i5")], "gather(x, i, axis=1)", lambda x, i: torch.gather(x, 1, i)),
    ("gather_rows", [("x", (5, 3), "n"), ("i", (2, 3), "i5")], "gather(x, i, axis=0)", lambda x, i: torch.gather(x, 0, i)),
    # -- compositions: fan-out (a value used many times), stop_gradient --
    ("fanout", [("x", (3, 4), "n")], "x * tanh(x) + exp(x) * x", lambda x: x * torch.tanh(x) + torch.exp(x) * x),
    # stop_gradient is the identity forward, so finite differences see through it: torch only.
    ("stop_gradient", [("x", (3, 4), "n")], "x * stop_gradient(x * x)", lambda x: x * (x * x).detach(), {"fd": False}),
    ("mask_bool", [("x", (3, 4), "n")], "x * cast(x > 0.0, f64)", lambda x: x * (x > 0).double()),
    # -- the nn functions of the standard library (stdlib/nn.tsr) --
    ("nn.linear", [("x", (3, 4), "n"), ("w", (5, 4), "n"), ("b", (5,), "n")], "nn.linear(x, w, b)", lambda x, w, b: F.linear(x, w, b)),
    ("nn.layer_norm", [("x", (3, 6), "n"), ("w", (6,), "n"), ("b", (6,), "n")], "nn.layer_norm(x, w, b)",
     lambda x, w, b: F.layer_norm(x, (6,), w, b, eps=1e-5)),
    ("nn.rms_norm", [("x", (3, 6), "n"), ("w", (6,), "n")], "nn.rms_norm(x, w)", lambda x, w: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w),
    ("nn.softmax", [("x", (3, 5), "n")], "nn.softmax(x)", lambda x: F.softmax(x, -1)),
    ("nn.softmax_axis0", [("x", (3, 5), "n")], "nn.softmax(x, axis=0)", lambda x: F.softmax(x, 0)),
    ("nn.log_softmax", [("x", (3, 5), "n")], "nn.log_softmax(x)", lambda x: F.log_softmax(x, -1)),
    ("nn.softmax_safe", [("x", (3, 5), "n")], "nn.softmax_safe(x)", lambda x: F.softmax(x, -1)),
    ("nn.layer_norm_safe", [("x", (3, 6), "n"), ("w", (6,), "n"), ("b", (6,), "n")], "nn.layer_norm_safe(x, w, b)",
     lambda x, w, b: F.layer_norm(x, (6,), w, b, eps=1e-5)),
    ("nn.rms_norm_safe", [("x", (3, 6), "n"), ("w", (6,), "n")], "nn.rms_norm_safe(x, w)",
     lambda x, w: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w),
    ("nn.logsumexp_safe", [("x", (3, 5), "n")], "nn.logsumexp_safe(x)", lambda x: torch.logsumexp(x, -1)),
    # nn.gelu's erf is Abramowitz & Stegun 7.1.26 (error 1.5e-7, stdlib/nn.tsr): torch within that.
    ("nn.gelu", [("x", (3, 4), "n")], "nn.gelu(x)", F.gelu, {"torch_tol": (1e-6, 1e-6)}),
    ("nn.gelu_tanh", [("x", (3, 4), "n")], 'nn.gelu(x, approximate="tanh")', _gelu_tanh),
    ("nn.silu", [("x", (3, 4), "n")], "nn.silu(x)", F.silu),
    ("nn.relu", [("x", (3, 4), "n")], "nn.relu(x)", F.relu),
    ("nn.embedding", [("ids", (2, 3), "i6"), ("t", (6, 4), "n")], "nn.embedding(ids, t)", lambda ids, t: F.embedding(ids, t)),
    ("nn.cross_entropy", [("z", (4, 5), "n"), ("l", (4,), "i5")], "nn.cross_entropy(z, l)", lambda z, l: F.cross_entropy(z, l)),
    ("nn.mse", [("p", (3, 4), "n"), ("t", (3, 4), "n")], "nn.mse(p, t)", F.mse_loss),
    ("nn.sdpa", [("q", (2, 3, 4), "n"), ("k", (2, 5, 4), "n"), ("v", (2, 5, 3), "n")],
     "nn.scaled_dot_product_attention(q, k, v)", _sdpa),
    ("nn.sdpa_causal", [("q", (2, 4, 4), "n"), ("k", (2, 4, 4), "n"), ("v", (2, 4, 3), "n")],
     "nn.scaled_dot_product_attention(q, k, v, causal=True)", lambda q, k, v: _sdpa(q, k, v, True)),
    ("nn.rotary_embedding", [("x", (3, 4), "n"), ("c", (3, 4), "n"), ("s", (3, 4), "n")], "nn.rotary_embedding(x, c, s)", _rope),
    # -- convolution and pooling (ir/autodiff/WindowRules.cpp): strides, pads, dilation, groups --
    ("conv", [("x", (2, 4, 5, 6), "n"), ("w", (6, 2, 3, 2), "n")], "conv(x, w, stride=(2, 1), padding=(1, 0, 0, 1), dilation=(1, 2), groups=2)",
     lambda x, w: F.conv2d(F.pad(x, (0, 1, 1, 0)), w, stride=(2, 1), dilation=(1, 2), groups=2)),
    ("conv_transpose", [("x", (1, 4, 3, 4), "n"), ("w", (4, 1, 2, 3), "n")],
     "conv_transpose(x, w, stride=2, padding=(1, 0), output_padding=(1, 0), groups=2)",
     lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=(1, 0), output_padding=(1, 0), groups=2)),
    ("max_pool", [("x", (2, 2, 7), "n")], "max_pool(x, 3, stride=2, padding=1, ceil_mode=True)",
     lambda x: F.max_pool1d(x, 3, stride=2, padding=1, ceil_mode=True)),
    ("avg_pool", [("x", (1, 2, 5, 6), "n")], "avg_pool(x, (2, 3), stride=2, padding=1, ceil_mode=True, count_include_pad=False)",
     lambda x: F.avg_pool2d(x, (2, 3), stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    ("nn.conv2d", [("x", (2, 3, 5, 5), "n"), ("w", (4, 3, 3, 3), "n"), ("b", (4,), "n")], "nn.conv2d(x, w, b, padding=1)",
     lambda x, w, b: F.conv2d(x, w, b, padding=1)),
    ("nn.max_pool2d", [("x", (1, 2, 6, 5), "n")], "nn.max_pool2d(x, 2, stride=1, dilation=2)", lambda x: F.max_pool2d(x, 2, stride=1, dilation=2)),
    ("nn.avg_pool2d", [("x", (1, 2, 6, 5), "n")], "nn.avg_pool2d(x, 3, stride=2, padding=1)", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1)),
    # the gradient of the gradient: conv's vjp is conv_transpose and a conv, max_pool's max_pool_grad
    ("conv_grad_of_grad", [("x", (1, 2, 5, 4), "n"), ("w", (3, 2, 2, 2), "n")],
     "grad(lambda a: sum(tanh(conv(a, w, stride=2, padding=1))))(x) * x",
     lambda x, w: _grad_of(lambda a: torch.tanh(F.conv2d(a, w, stride=2, padding=1)).sum(), x) * x),
    ("max_pool_grad_of_grad", [("x", (1, 2, 6, 5), "n")],
     "grad(lambda a: sum(max_pool(a * a, 2, stride=1)))(x)",
     lambda x: _grad_of(lambda a: F.max_pool2d(a * a, 2, stride=1).sum(), x)),
    # -- random draws: the key is a value; the backward pass uses the forward's mask --
    ("nn.dropout", [("key", (), "key"), ("x", (4, 6), "n")], "nn.dropout(key, x, 0.5)", None),
    ("uniform_mask", [("key", (), "key"), ("x", (4, 6), "n")], "where(random.uniform(key, (4, 6), f64) < 0.3, x * 2.0, x)", None),
]


def tsr_type(shape, kind):
    dims = ", ".join(str(d) for d in shape)
    if kind == "key":
        return "Key"
    dt = "i64" if kind.startswith("i") else "f64"
    return f"Tensor[{dims + ', ' if dims else ''}{dt}]"


def make_input(gen, shape, kind):
    if kind == "key":
        return None
    if kind.startswith("i"):
        return torch.randint(0, int(kind[1:]), shape, generator=gen, dtype=torch.int64)
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    if kind == "p":
        return 0.5 + x.abs()
    if kind == "u":
        return torch.rand(shape, generator=gen, dtype=torch.float64) * 1.8 - 0.9
    return x


def program(cases_with_shapes):
    lines = ["import nn", ""]
    for i, (name, inputs, expr, _fn, yshape) in enumerate(cases_with_shapes):
        params = ", ".join(f"{n}: {tsr_type(s, k)}" for n, s, k in inputs)
        wparam = f"w_: {tsr_type(yshape, 'n')}"
        names = ", ".join(n for n, _, _ in inputs)
        diff = [j for j, (_, _, k) in enumerate(inputs) if k in ("n", "p", "u")]
        lines += [f"# {name}", "@jit", f"def f_{i}({params}, {wparam}) -> f64:", f"    return sum(({expr}) * w_)", ""]
        lines += ["@jit", f"def d_{i}({params}, {wparam}):",
                  f"    return value_and_grad(f_{i}, argnums=({', '.join(map(str, diff))},))({names}, w_)", ""]
        vparams = ", ".join(f"v_{inputs[j][0]}: {tsr_type(inputs[j][1], 'n')}" for j in diff)
        plus = ", ".join(f"{n} + {H} * v_{n}" if j in diff else n for j, (n, _, _) in enumerate(inputs))
        minus = ", ".join(f"{n} - {H} * v_{n}" if j in diff else n for j, (n, _, _) in enumerate(inputs))
        lines += ["@jit", f"def fd_{i}({params}, {wparam}, {vparams}) -> f64:",
                  f"    return (f_{i}({plus}, w_) - f_{i}({minus}, w_)) / {2 * H}", ""]
        tangents = ", ".join(f"v_{n}" if j in diff else n for j, (n, _, _) in enumerate(inputs))
        lines += ["@jit", f"def j_{i}({params}, {wparam}, {vparams}) -> f64:",
                  f"    y, t = jvp(f_{i}, ({names}, w_), ({tangents}, zeros_like(w_)))",
                  "    return t", ""]
    return "\n".join(lines)


def run_eval(tsr_eval, graph_file, graph, inputs, tmp):
    args = []
    for k, v in enumerate(inputs):
        if isinstance(v, str) and v.startswith("key:"):
            args += ["--key", v[4:]]
        else:
            path = os.path.join(tmp, f"in{k}.npy")
            np.save(path, v.numpy() if isinstance(v, torch.Tensor) else v)
            args += ["--in", path]
    out = os.path.join(tmp, "out")
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.remove(os.path.join(out, f))
    p = subprocess.run([tsr_eval, graph_file, "--graph", graph, *args, "--out-dir", out], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"tsr-eval {graph}: {p.stderr.strip()}")
    n = len([f for f in os.listdir(out) if f.endswith(".npy")])
    return [torch.from_numpy(np.load(os.path.join(out, f"out{j}.npy"))) for j in range(n)]


def _scaled(fn):
    return lambda *a: fn(*a) * 1.001


def main():
    tsr_eval, tsrc = sys.argv[1], sys.argv[2]
    # --only A,B: the cases whose names contain A or B. --negative-torch: each case's torch
    # function scaled by 1.001, a wrong expectation that the torch comparison must reject (the
    # control of the convolution and pooling cases: ctest negative_autodiff_grad_windows).
    only = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
    negative = "--negative-torch" in sys.argv
    gen = torch.Generator().manual_seed(1234)
    prepared = []
    for case in CASES:
        if only is not None and not any(o in case[0] for o in only):
            continue
        if negative and case[3] is not None:
            case = (case[0], case[1], case[2], _scaled(case[3])) + tuple(case[4:])
        name, inputs, expr, fn = case[:4]
        opts = case[4] if len(case) > 4 else {}
        vals = [make_input(gen, s, k) for _, s, k in inputs]
        if fn is not None:
            y = fn(*vals)
            yshape = tuple(y.shape)
        else:
            yshape = tuple(inputs[-1][1])
        prepared.append((name, inputs, expr, fn, yshape, vals, opts))
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "grads.tsr")
        with open(src, "w") as f:
            f.write(program([(n, i, e, fn, ys) for n, i, e, fn, ys, _, _ in prepared]))
        p = subprocess.run([tsrc, src, "--emit=graph"], capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            print(p.stdout[-2000:], p.stderr[-4000:])
            print("FAIL lowering the generated program")
            print("0 passed, 1 failed")
            return 1
        graphs = os.path.join(tmp, "grads.graph")
        with open(graphs, "w") as f:
            f.write(p.stdout)
        def check(i):
            """(ok, line) for case i; its own folder and generator, so that cases run in parallel."""
            name, inputs, expr, fn, yshape, vals, opts = prepared[i]
            gen = torch.Generator().manual_seed(1234 + i)
            tmp_i = os.path.join(tmp, f"case{i}")
            os.makedirs(tmp_i, exist_ok=True)
            try:
                w = torch.randn(yshape, generator=gen, dtype=torch.float64)
                diff = [j for j, (_, _, k) in enumerate(inputs) if k in ("n", "p", "u")]
                ins = [f"key:{7 + i}" if k == "key" else v for (_, _, k), v in zip(inputs, vals)]
                outs = run_eval(tsr_eval, graphs, f"d_{i}", ins + [w], tmp_i)
                value, grads = outs[0], outs[1:]
                problems = []
                notes = []
                # zip() below stops at the shorter list: a missing gradient must not go unchecked.
                if len(grads) != len(diff):
                    problems.append(f"{len(grads)} gradients for {len(diff)} differentiable inputs")
                if fn is not None:
                    tv = [v.clone().requires_grad_(True) if j in diff else v for j, v in enumerate(vals)]
                    ref = (fn(*tv) * w).sum()
                    ref.backward()
                    rtol, atol = opts.get("torch_tol", (1e-9, 1e-10))
                    if not torch.allclose(value, ref.detach(), rtol=rtol, atol=atol):
                        problems.append(f"value {value.item()} vs torch {ref.item()}")
                    worst = 0.0
                    for j, g in zip(diff, grads):
                        tg = tv[j].grad
                        err = (g - tg).abs().max().item() if g.numel() else 0.0
                        worst = max(worst, err)
                        if g.shape != tg.shape or not torch.allclose(g, tg, rtol=rtol, atol=atol):
                            problems.append(f"grad of {inputs[j][0]}: max error {err:.3g} vs torch")
                    notes.append(f"torch max err {worst:.1e}")
                elif name == "nn.dropout":
                    # The gradient is the mask times 1/(1-p) times w: exactly 0 or 2 w.
                    g = grads[0]
                    ok = torch.all((g == 0) | torch.isclose(g, 2 * w, rtol=1e-12, atol=0))
                    kept = (g != 0).double().mean().item()
                    if not ok or not (0.2 < kept < 0.8):
                        problems.append(f"dropout gradient is not the scaled mask (kept {kept:.2f})")
                    notes.append(f"kept {kept:.2f}")
                worst_fd = worst_jvp = 0.0
                for _ in range(3):
                    vs = [torch.randn(vals[j].shape, generator=gen, dtype=torch.float64) for j in diff]
                    (fd,) = run_eval(tsr_eval, graphs, f"fd_{i}", ins + [w] + vs, tmp_i)
                    dot = sum((g * v).sum() for g, v in zip(grads, vs))
                    # Forward mode: the jvp of the scalar loss is the same directional derivative.
                    (jv,) = run_eval(tsr_eval, graphs, f"j_{i}", ins + [w] + vs, tmp_i)
                    jrel = abs(jv.item() - float(dot)) / max(1.0, abs(float(dot)))
                    worst_jvp = max(worst_jvp, jrel)
                    if jrel > opts.get("jvp_rtol", 1e-9):
                        problems.append(f"jvp {jv.item():.15g} vs <grad, v> {float(dot):.15g}")
                    rel = abs(fd.item() - float(dot)) / max(1.0, abs(float(dot)))
                    if not opts.get("fd", True):
                        continue
                    worst_fd = max(worst_fd, rel)
                    if rel > opts.get("fd_rtol", 1e-6):
                        problems.append(f"finite differences {fd.item():.10g} vs <grad, v> {float(dot):.10g}")
                if opts.get("fd", True):
                    notes.append(f"fd rel err {worst_fd:.1e}")
                notes.append(f"jvp rel err {worst_jvp:.1e}")
                if problems:
                    return False, f"FAIL {name}: " + "; ".join(problems)
                return True, f"ok   {name}: " + ", ".join(notes)
            except Exception as e:  # noqa: BLE001 (a failure of one case is reported, the rest run)
                return False, f"FAIL {name}: {e}"

        workers = max(1, int(os.environ.get("TSR_TEST_JOBS", "1")))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for ok, line in pool.map(check, range(len(prepared))):
                passed += ok
                failed += not ok
                print(line)
    return summary(passed, failed, minimum=len(prepared))


if __name__ == "__main__":
    sys.exit(main())
