#!/usr/bin/env python3
"""ONNX export round trip (ctest onnx_export; spec 15, issue 19).

  export_roundtrip.py TSR TSRC [--negative]

A .tsr program exports, with onnx.save, a @jit function that exercises the exporter's op forms
(matmul, both gelus, silu, rsqrt, layer_norm, softmax, log1p, expm1, exp2, log2, slices,
concat, transpose, where and comparisons, maximum/minimum, a max reduction, float % and //,
sum and mean, reshape, arange, gather), a model it loaded with onnx.load (its initializers
captured), an imported convolution of ONNX's backend test data (one conv op, exported as Conv),
and a function of convolution and pooling (nn.conv2d with explicit asymmetric pads, nn.max_pool2d
with ceil_mode and dilation, nn.avg_pool2d with and without count_include_pad), a function of a
reversed `scan` (exported as ONNX's Scan, its body reading `w` from the enclosing graph) and an
imported GRU of the backend data (imported as a scan op, exported as Scan), each specialized to
its example; `tsrc --entry block --emit=onnx` exports the same
function generic in its batch "B" (a dim_param). Every model must pass ONNX's checker with full
shape inference, and its outputs, evaluated by this file's NumPy interpreter of the ONNX
operators used (written from the operator specification; onnx.reference is newer than this
machine's onnx 1.12, and ONNX Runtime is not installed here), must match what `tsr run` computes
for the same inputs (relative error 1e-5; the generic model at two batch sizes).

An op without an ONNX form (an integer shift) is an error naming the op and its line, from
`tsrc --emit=onnx` and from onnx.save in `tsr run` (exit 1 both).

--negative is the control: each exported model's first Add node (of its graph, else of a Scan's
body) becomes a Sub before it is evaluated, and every comparison must fail ("FAIL: ... differ").
"""
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from testlib import skip  # noqa: E402
from torch_python import reexec_with_torch  # noqa: E402

reexec_with_torch("onnx_export")  # an interpreter with numpy (and onnx: Debian's python3-onnx)

import numpy as np  # noqa: E402

try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:
    skip("onnx_export", f"the onnx Python package is missing ({e}; Debian: python3-onnx)")

CONV = "/usr/share/libonnx-testdata/data/pytorch-converted/test_Conv2d"
GRU = "/usr/share/libonnx-testdata/data/node/test_gru_seq_length"

BAD = '''@jit
def shifty(x: Tensor["B", 4, i32]) -> Tensor["B", 4, i32]:
    return (x << 1) + x

def main():
    onnx.save("shifty.onnx", shifty, ones((2, 4), dtype=i32))
'''
BAD_MESSAGE = "graph `shifty`: the operation `shl` has no ONNX form (at bad.tsr:3:12)"

PROGRAM = '''import nn

f = onnx.load("mlp.onnx")
conv_model = onnx.load("CONV/model.onnx")
gru = onnx.load("GRU/model.onnx")

@jit
def rec(h: Tensor[3, 4, f32], xs: Tensor[5, 3, 4, f32], w: Tensor[4, 4, f32]) -> Tensor[3, 4, f32]:
    c, ys = scan(lambda c, x: (tanh(c @ w + x), c * 2.0), h, xs, reverse=True)
    return c + sum(ys, axis=0)

@jit
def block(x: Tensor["B", 4, f32], w: Tensor[4, 4, f32]) -> Tensor["B", 4, f32]:
    h = x @ w
    h = gelu(h) + silu(h) * 0.5 - rsqrt(abs(h) + 1.0) + gelu(h, approximate="tanh")
    h = nn.layer_norm(h, eps=1e-5)
    s = nn.softmax(h, axis=-1) + log1p(abs(h)) + expm1(h * 0.1) + exp2(h) - log2(abs(h) + 2.0)
    t = concat([s[:, 2:], s[:, :2]], axis=1).T
    m = where(t > 0.5, t, -t) + maximum(t, 0.25) - minimum(t, 0.75) + max(t, axis=1, keepdims=True)
    r = m.T % 0.7 + m.T // 0.3 + sum(m, axis=0)[:, None] * 0.01 + mean(m) + m.T.reshape(-1, 4) * 2.0
    return r + cast(arange(4), f32) + gather(r, tensor([[1, 0, 3, 2]]) + zeros(r.shape, dtype=i64), axis=1)

@jit
def pools(x: Tensor[2, 3, 9, 8, f32], w: Tensor[4, 3, 3, 3, f32]) -> Tensor[2, 4, 3, 3, f32]:
    y = nn.conv2d(x, w, stride=2, padding=(1, 0, 0, 1))
    z = nn.max_pool2d(y, 2, stride=2, padding=1, ceil_mode=True) + nn.max_pool2d(y, 2, stride=1, padding=1, dilation=2)[:, :, :3, :3]
    return nn.avg_pool2d(z, 2, stride=1, padding=1, count_include_pad=False)[:, :, :3, :3] + nn.avg_pool2d(z, 3, stride=1, padding=1)

def main():
    x = load("x.npy")
    x3 = load("x3.npy")
    w = load("w.npy")
    c = load("c.npy")
    onnx.save("block.onnx", block, x, w)
    onnx.save("f.onnx", f, x)
    onnx.save("conv.onnx", conv_model, c)
    onnx.save("pools.onnx", pools, load("px.npy"), load("pw.npy"))
    onnx.save("rec.onnx", rec, load("rh.npy"), load("rxs.npy"), w)
    onnx.save("gru.onnx", gru, load("gx.npy"), load("gw.npy"), load("gr.npy"), load("gb.npy"))
    y, p = f(x)
    save("out.npz", {"block": block(x, w), "block3": block(x3, w), "f_y": y, "f_p": p, "conv": conv_model(c), "pools": pools(load("px.npy"), load("pw.npy")),
                     "rec": rec(load("rh.npy"), load("rxs.npy"), w), "gru": gru(load("gx.npy"), load("gw.npy"), load("gr.npy"), load("gb.npy"))})
'''


# ---- a NumPy interpreter of the ONNX operators the exporter writes (opset 17) -------------------

def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


_ELEM = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64, TensorProto.INT32: np.int32,
         TensorProto.INT64: np.int64, TensorProto.INT8: np.int8, TensorProto.BOOL: np.bool_, TensorProto.FLOAT16: np.float16}
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _reduce(fn, x, axes, keep):
    if axes is None or len(axes) == 0:
        axes = tuple(range(x.ndim))
    return fn(x, axis=tuple(int(a) for a in axes), keepdims=bool(keep))


def _slice(x, starts, ends, axes, steps):
    idx = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        n = x.shape[a]
        s, e, st = int(s), int(e), int(st)
        # Clamping as the operator's specification says (negative: from the end).
        s = s + n if s < 0 else s
        e = e + n if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), n), min(max(e, 0), n)
        else:
            s, e = min(max(s, 0), n - 1), min(max(e, -1), n)
        idx[a] = slice(s, None if e < 0 else e, st)
    return x[tuple(idx)]


def _conv(x, w, b, a):
    """ONNX's Conv (NCHW; strides, pads begins then ends, dilations, group), summed in f64 one
    kernel tap at a time over the padded input's strided view."""
    n = x.ndim - 2
    strides, dil = a.get("strides", [1] * n), a.get("dilations", [1] * n)
    pads, g = a.get("pads", [0] * (2 * n)), a.get("group", 1)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[k], pads[n + k]) for k in range(n)])
    K = w.shape[2:]
    out = [(xp.shape[2 + k] - dil[k] * (K[k] - 1) - 1) // strides[k] + 1 for k in range(n)]
    N, C, M = x.shape[0], x.shape[1], w.shape[0]
    cg, mg = C // g, M // g
    y = np.zeros((N, M, *out))
    for tap in np.ndindex(*K):
        view = tuple(slice(tap[k] * dil[k], tap[k] * dil[k] + strides[k] * (out[k] - 1) + 1, strides[k]) for k in range(n))
        patch = xp[(slice(None), slice(None)) + view]
        for gi in range(g):
            wt = w[(slice(gi * mg, (gi + 1) * mg), slice(None)) + tap].astype(np.float64)
            y[:, gi * mg:(gi + 1) * mg] += np.einsum("nc...,mc->nm...", patch[:, gi * cg:(gi + 1) * cg], wt)
    if b is not None:
        y += b.reshape((1, M) + (1,) * n)
    return y.astype(x.dtype)


def _pool(x, a, kind):
    """ONNX's MaxPool and AveragePool (kernel_shape, strides, pads, dilations, ceil_mode,
    count_include_pad) over the padded input's strided views, one kernel tap at a time; the
    padding never wins a max and counts toward a mean only with count_include_pad."""
    n = x.ndim - 2
    K = a["kernel_shape"]
    strides, dil = a.get("strides", [1] * n), a.get("dilations", [1] * n)
    pads = list(a.get("pads", [0] * (2 * n)))
    out = []
    for k in range(n):
        span = dil[k] * (K[k] - 1) + 1
        total = x.shape[2 + k] + pads[k] + pads[n + k] - span
        o = (-(-total // strides[k]) if a.get("ceil_mode", 0) else total // strides[k]) + 1
        pads[n + k] += max(0, (o - 1) * strides[k] + span - (x.shape[2 + k] + pads[k] + pads[n + k]))
        out.append(o)
    width = [(0, 0), (0, 0)] + [(pads[k], pads[n + k]) for k in range(n)]
    xp = np.pad(x.astype(np.float64), width, constant_values=-np.inf if kind == "MaxPool" else 0.0)
    inside = np.pad(np.ones(x.shape), width)
    acc = np.full(x.shape[:2] + tuple(out), -np.inf if kind == "MaxPool" else 0.0)
    cnt = np.zeros_like(acc)
    for tap in np.ndindex(*K):
        view = (slice(None), slice(None)) + tuple(
            slice(tap[k] * dil[k], tap[k] * dil[k] + strides[k] * (out[k] - 1) + 1, strides[k]) for k in range(n))
        if kind == "MaxPool":
            acc = np.maximum(acc, xp[view])
        else:
            acc += xp[view]
            cnt += inside[view]
    if kind == "AveragePool":
        acc = acc / (np.prod(K) if a.get("count_include_pad", 0) else cnt)
    return acc.astype(x.dtype)


def _scan(node, a, i, env):
    """ONNX's Scan (opset 9+): the body run once per row of the scan inputs (scan_input_axes,
    scan_input_directions), the states carried, each scan output stacked along its axis in the
    order of the iterations, or prepended (scan_output_directions = 1)."""
    body, m = a["body"], a["num_scan_inputs"]
    n = len(i) - m
    states, xs = list(i[:n]), [np.moveaxis(x, ax, 0) for x, ax in zip(i[n:], a.get("scan_input_axes", [0] * m))]
    xs = [x[::-1] if d else x for x, d in zip(xs, a.get("scan_input_directions", [0] * m))]
    ys = []
    for t in range(xs[0].shape[0]):
        outs = run_graph(body, dict(env), states + [x[t] for x in xs], [v.name for v in body.input])
        states, ys = outs[:n], ys + [outs[n:]]
    k = len(body.output) - n
    stacked = []
    for j in range(k):
        y = np.stack([step[j] for step in ys])
        if a.get("scan_output_directions", [0] * k)[j]:
            y = y[::-1]
        stacked.append(np.moveaxis(y, 0, a.get("scan_output_axes", [0] * k)[j]))
    return states + stacked


def run_onnx(model, feeds):
    env = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    return run_graph(model.graph, env, list(feeds.values()), list(feeds.keys()))


def run_graph(graph, env, values, names):
    """The nodes of `graph` (the model's, or a Scan body reading the enclosing `env`)."""
    env.update(zip(names, values))
    for node in graph.node:
        a = _attrs(node)
        i = [env[n] if n else None for n in node.input]
        t = node.op_type
        un = {"Identity": lambda x: x, "Neg": np.negative, "Abs": np.abs, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt,
              "Reciprocal": lambda x: (1 / x).astype(x.dtype), "Tanh": np.tanh, "Sigmoid": lambda x: (1 / (1 + np.exp(-x))).astype(x.dtype),
              "Relu": lambda x: np.maximum(x, 0).astype(x.dtype), "Erf": lambda x: _erf(x).astype(x.dtype), "Floor": np.floor,
              "Ceil": np.ceil, "Round": np.round, "Sign": np.sign, "Not": np.logical_not, "Sin": np.sin, "Cos": np.cos, "Shape": lambda x: np.array(x.shape, np.int64)}
        bi = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": lambda x, y: (x / y).astype(x.dtype) if x.dtype.kind == "f" else np.trunc(x / y).astype(x.dtype),
              "Pow": lambda x, y: np.power(x, y).astype(x.dtype), "Max": np.maximum, "Min": np.minimum, "And": np.logical_and,
              "Or": np.logical_or, "Xor": np.logical_xor, "Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal,
              "Greater": np.greater, "GreaterOrEqual": np.greater_equal, "MatMul": np.matmul}
        if t in un:
            out = un[t](i[0])
        elif t in bi:
            out = bi[t](i[0], i[1])
        elif t == "Cast":
            out = i[0].astype(_ELEM[a["to"]])
        elif t == "Mod":
            out = np.mod(i[0], i[1]) if not a.get("fmod", 0) else np.fmod(i[0], i[1])
        elif t == "Where":
            out = np.where(i[0], i[1], i[2])
        elif t == "ReduceSum":
            out = _reduce(np.sum, i[0], i[1] if len(i) > 1 else None, a.get("keepdims", 1)).astype(i[0].dtype)
        elif t in ("ReduceMax", "ReduceMin", "ReduceProd"):
            fn = {"ReduceMax": np.max, "ReduceMin": np.min, "ReduceProd": np.prod}[t]
            out = _reduce(fn, i[0], a.get("axes"), a.get("keepdims", 1)).astype(i[0].dtype)
        elif t in ("ArgMax", "ArgMin"):
            fn = np.argmax if t == "ArgMax" else np.argmin
            out = fn(i[0], axis=a.get("axis", 0))
            if a.get("keepdims", 1):
                out = np.expand_dims(out, a.get("axis", 0))
            out = out.astype(np.int64)
        elif t == "Reshape":
            shape = [int(s) for s in i[1]]
            shape = [i[0].shape[k] if s == 0 else s for k, s in enumerate(shape)]
            out = i[0].reshape(shape)
        elif t == "Expand":
            out = i[0] * np.ones([int(s) for s in i[1]], i[0].dtype)
        elif t == "Transpose":
            out = np.transpose(i[0], a.get("perm"))
        elif t == "Slice":
            axes = i[3] if len(i) > 3 and i[3] is not None else range(len(i[1]))
            steps = i[4] if len(i) > 4 and i[4] is not None else [1] * len(i[1])
            out = _slice(i[0], i[1], i[2], [int(x) % i[0].ndim for x in axes], steps)
        elif t == "Concat":
            out = np.concatenate(i, axis=a["axis"])
        elif t == "GatherElements":
            out = np.take_along_axis(i[0], i[1].astype(np.int64), axis=a.get("axis", 0))
        elif t in ("MaxPool", "AveragePool"):
            out = _pool(i[0], a, t)
        elif t == "Conv":
            out = _conv(i[0], i[1], i[2] if len(i) > 2 else None, a)
        elif t == "Gather":
            out = np.take(i[0], i[1].astype(np.int64), axis=a.get("axis", 0))
        elif t == "Scan":
            for name, value in zip(node.output, _scan(node, a, i, env)):
                env[name] = np.asarray(value)
            continue
        else:
            raise RuntimeError(f"the test's interpreter has no {t}")
        env[node.output[0]] = np.asarray(out)
    return [env[o.name] for o in graph.output]


# ---- the test ------------------------------------------------------------------------------------

def mlp_model(path, rng):
    params = {"W1": rng.standard_normal((4, 16)).astype(np.float32) * 0.5, "b1": rng.standard_normal(16).astype(np.float32) * 0.1,
              "W2": rng.standard_normal((16, 3)).astype(np.float32) * 0.5, "b2": rng.standard_normal(3).astype(np.float32) * 0.1}
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h1"]),
             helper.make_node("Tanh", ["h1"], ["h2"]), helper.make_node("MatMul", ["h2", "W2"], ["h3"]),
             helper.make_node("Add", ["h3", "b2"], ["y"]), helper.make_node("Softmax", ["y"], ["p"], axis=-1)]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3]),
                           helper.make_tensor_value_info("p", TensorProto.FLOAT, ["N", 3])],
                          [numpy_helper.from_array(v, k) for k, v in params.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main():
    tsr, tsrc = sys.argv[1], sys.argv[2]
    negative = "--negative" in sys.argv[3:]
    for data in (CONV, GRU):
        if not os.path.isdir(data):
            skip("onnx_export", f"{data} is missing (Debian: libonnx-testdata)")
    passed = failed = 0
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as work:
        mlp_model(os.path.join(work, "mlp.onnx"), rng)
        x, x3 = rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
        w = rng.standard_normal((4, 4)).astype(np.float32)
        c = numpy_helper.to_array(onnx.load_tensor(os.path.join(CONV, "test_data_set_0", "input_0.pb")))
        px, pw = rng.standard_normal((2, 3, 9, 8)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
        rh, rxs = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((5, 3, 4)).astype(np.float32)
        gx, gw, gr, gb = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 3), (1, 15, 3), (1, 15, 5), (1, 30)))
        for n, v in {"x": x, "x3": x3, "w": w, "c": c, "px": px, "pw": pw, "rh": rh, "rxs": rxs, "gx": gx, "gw": gw, "gr": gr, "gb": gb}.items():
            np.save(os.path.join(work, n + ".npy"), v)
        with open(os.path.join(work, "prog.tsr"), "w") as f:
            f.write(PROGRAM.replace("CONV", CONV).replace("GRU", GRU))
        r = subprocess.run([tsr, "run", "prog.tsr", "--device", "cpu"], cwd=work, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            print(f"FAIL: tsr run exited {r.returncode}:\n{r.stdout}{r.stderr}")
            print("0 passed, 1 failed")
            return 1
        r = subprocess.run([tsrc, "prog.tsr", "--entry", "block", "--emit=onnx", "-o", "block_generic.onnx"], cwd=work,
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            print(f"FAIL: tsrc --emit=onnx exited {r.returncode}:\n{r.stdout}{r.stderr}")
            print("0 passed, 1 failed")
            return 1
        # An op without an ONNX form: an error naming it, from both commands.
        with open(os.path.join(work, "bad.tsr"), "w") as f:
            f.write(BAD)
        for cmd in ([tsrc, "bad.tsr", "--entry", "shifty", "--emit=onnx", "-o", "bad.onnx"], [tsr, "run", "bad.tsr", "--device", "cpu"]):
            r = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=600)
            if r.returncode == 1 and BAD_MESSAGE in r.stderr and not os.path.exists(os.path.join(work, "bad.onnx")):
                passed += 1
                print(f"PASS {os.path.basename(cmd[0])}: {BAD_MESSAGE}")
            else:
                failed += 1
                print(f"FAIL: {' '.join(os.path.basename(c) for c in cmd[:2])}: exit {r.returncode}, expected 1 and `{BAD_MESSAGE}`:\n{r.stderr}")
        out = dict(np.load(os.path.join(work, "out.npz")))
        cases = [("block.onnx", {"x": x, "w": w}, ["block"]), ("f.onnx", {"x": x}, ["f_y", "f_p"]), ("conv.onnx", {"x": c}, ["conv"]),
                 ("pools.onnx", {"x": px, "w": pw}, ["pools"]), ("rec.onnx", {"h": rh, "xs": rxs, "w": w}, ["rec"]),
                 ("gru.onnx", {"X": gx, "W": gw, "R": gr, "B": gb}, ["gru"]),
                 ("block_generic.onnx", {"x": x, "w": w}, ["block"]), ("block_generic.onnx", {"x": x3, "w": w}, ["block3"])]
        for file, feeds, names in cases:
            model = onnx.load(os.path.join(work, file))
            try:
                onnx.checker.check_model(model, full_check=True)
            except Exception as e:  # noqa: BLE001 - the checker's errors are of several classes
                failed += 1
                print(f"FAIL: {file} fails ONNX's checker: {e}")
                continue
            inputs = [i.name for i in model.graph.input]
            if file == "conv.onnx":
                feeds = {inputs[0]: feeds["x"]}
            if negative:  # the first Add of the graph, or else of a Scan's body
                bodies = [helper.get_attribute_value(a) for n in model.graph.node if n.op_type == "Scan" for a in n.attribute if a.name == "body"]
                adds = [n for g in [model.graph] + bodies for n in g.node if n.op_type == "Add"]
                if adds:
                    adds[0].op_type = "Sub"
            outs = run_onnx(model, {k: v for k, v in feeds.items() if k in inputs})
            dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
            for got, name in zip(outs, names):
                want = out[name]
                e = rel(got, want) if got.shape == want.shape else float("inf")
                if e <= 1e-5:
                    passed += 1
                    print(f"PASS {file} ({name}, input dims {dims}, {len(model.graph.node)} nodes): rel {e:.1e}")
                else:
                    failed += 1
                    print(f"FAIL: {file} ({name}) outputs differ: rel {e:.3g}, shape {got.shape} vs {want.shape}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
