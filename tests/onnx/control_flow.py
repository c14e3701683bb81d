#!/usr/bin/env python3
"""ONNX's control flow imported by onnx.load (ctest onnx_control_flow; issue 19's If and Loop as
regions, and Scan): four models written with ONNX's helper, each loaded with
`onnx.load(..., split_params=True)`, their output and the gradients of sum(y * r) with respect to
the input and to a weight the subgraph reads from the enclosing graph, against the same
computation in PyTorch with torch.autograd (relative error 1e-5 in f32).

  control_flow.py TSR [--negative]

- if:    If on a condition computed from x at run time (sum(x) > 0), then x @ W, else tanh(x) * 2;
         run with an x of each sign (both branches).
- loop:  Loop with a trip count of 4 and the condition kept: h = tanh(h @ W + x) (x from the
         enclosing graph), the final h and every step's h (a scan output); the import must be
         one scan op, not unrolled.
- while: Loop of at most 10 iterations whose body computes its condition (sum(h) < 20 after
         h = h * 1.5 + W): a bounded while loop, h kept once the condition is false (it stops
         after 3 to 9 iterations, checked on PyTorch's side).
- scan:  Scan (opset 11) over axis 1 of xs, reversed, state s = tanh(s * w + x_t), the states
         stacked in the iterations' order along axis 1 (scan_output_axes = [1]).

--negative is the control: PyTorch's side gets other weights and inputs (x 1.1) and its while loop
runs one iteration more: every comparison must fail.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from testlib import skip, summary  # noqa: E402
from torch_python import reexec_with_torch  # noqa: E402

reexec_with_torch("onnx_control_flow")

import numpy as np  # noqa: E402
import torch  # noqa: E402

try:
    import onnx  # noqa: E402
    from onnx import TensorProto, helper, numpy_helper  # noqa: E402
except ImportError as e:
    skip("onnx_control_flow", f"the onnx Python package is missing ({e}; Debian: python3-onnx)")

F = TensorProto.FLOAT


def const(name, array):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(array), name + "_v"))


def model(nodes, inputs, outputs, inits, opset):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(m)
    return m


def if_model(W):
    then_g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["t"])], "then", [], [helper.make_tensor_value_info("t", F, [3, 4])])
    else_g = helper.make_graph([helper.make_node("Tanh", ["x"], ["e0"]), const("two", np.float32(2)), helper.make_node("Mul", ["e0", "two"], ["e"])],
                               "else", [], [helper.make_tensor_value_info("e", F, [3, 4])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), const("zero", np.float32(0)),
             helper.make_node("Greater", ["s", "zero"], ["c"]), helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    return model(nodes, [helper.make_tensor_value_info("x", F, [3, 4])], [helper.make_tensor_value_info("y", F, [3, 4])],
                 [numpy_helper.from_array(W, "W")], 13)


def loop_model(W):
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("MatMul", ["h_in", "W"], ["hw"]),
         helper.make_node("Add", ["hw", "x"], ["a"]), helper.make_node("Tanh", ["a"], ["h_out"]), helper.make_node("Identity", ["h_out"], ["h_scan"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("h_in", F, [3, 4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("h_out", F, [3, 4]),
         helper.make_tensor_value_info("h_scan", F, [3, 4])])
    nodes = [const("M", np.int64(4)), const("c", np.bool_(True)), helper.make_node("Loop", ["M", "c", "x"], ["h", "hs"], body=body),
             const("ax", np.array([0], np.int64)), helper.make_node("ReduceSum", ["hs", "ax"], ["hsum"], keepdims=0), helper.make_node("Add", ["h", "hsum"], ["y"])]
    return model(nodes, [helper.make_tensor_value_info("x", F, [3, 4])], [helper.make_tensor_value_info("y", F, [3, 4])],
                 [numpy_helper.from_array(W, "W")], 13)


def while_model(W):
    body = helper.make_graph(
        [const("k", np.float32(1.5)), helper.make_node("Mul", ["h_in", "k"], ["hk"]), helper.make_node("Add", ["hk", "W"], ["h_out"]),
         helper.make_node("ReduceSum", ["h_out"], ["s"], keepdims=0), const("lim", np.float32(20)), helper.make_node("Less", ["s", "lim"], ["cond_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("h_in", F, [4, 4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("h_out", F, [4, 4])])
    nodes = [const("M", np.int64(10)), const("c", np.bool_(True)), helper.make_node("Loop", ["M", "c", "x"], ["y"], body=body)]
    return model(nodes, [helper.make_tensor_value_info("x", F, [4, 4])], [helper.make_tensor_value_info("y", F, [4, 4])],
                 [numpy_helper.from_array(W, "W")], 13)


def scan_model(w):
    body = helper.make_graph(
        [helper.make_node("Mul", ["s_in", "w"], ["sw"]), helper.make_node("Add", ["sw", "x_t"], ["a"]), helper.make_node("Tanh", ["a"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["y_t"])],
        "body", [helper.make_tensor_value_info("s_in", F, [3, 4]), helper.make_tensor_value_info("x_t", F, [3, 4])],
        [helper.make_tensor_value_info("s_out", F, [3, 4]), helper.make_tensor_value_info("y_t", F, [3, 4])])
    nodes = [helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1, scan_input_axes=[1],
                              scan_input_directions=[1], scan_output_axes=[1])]
    return model(nodes, [helper.make_tensor_value_info("s0", F, [3, 4]), helper.make_tensor_value_info("xs", F, [3, 5, 4])],
                 [helper.make_tensor_value_info("s", F, [3, 4]), helper.make_tensor_value_info("ys", F, [3, 5, 4])],
                 [numpy_helper.from_array(w, "w")], 11)


def torch_if(W, x):
    return x @ W if x.sum() > 0 else torch.tanh(x) * 2


def torch_loop(W, x):
    h, hs = x, []
    for _ in range(4):
        h = torch.tanh(h @ W + x)
        hs.append(h)
    return h + sum(hs)


WHILE_STEPS, EXTRA_STEPS = [], []


def torch_while(W, x):
    h, stop = x, None
    for i in range(10):
        h = h * 1.5 + W
        if stop is None and not h.sum() < 20:
            stop = i + len(EXTRA_STEPS)
        if stop is not None and i >= stop:
            break
    WHILE_STEPS.append(i + 1)
    return h


def torch_scan(w, s0, xs):
    # The input reversed (scan_input_directions = 1); the outputs in the order of the iterations.
    s, ys = s0, []
    for t in reversed(range(xs.shape[1])):
        s = torch.tanh(s * w + xs[:, t])
        ys.append(s)
    return s, torch.stack(ys, 1)


PROGRAM = '''def main():
    d = load("in.npz")
    res = {}
    for name in ["pos", "neg"]:
        apply, params = onnx.load("if.onnx", split_params=True)
        x = d["if_x_" + name]
        loss, g = value_and_grad(lambda p, a: sum(apply(p, a) * d["if_r"]), argnums=(0, 1))(params, x)
        res["if_" + name + ".y"] = apply(params, x)
        res["if_" + name + ".gx"] = g[1]
        res["if_" + name + ".gW"] = g[0]["W"]
    apply, params = onnx.load("loop.onnx", split_params=True)
    loss, g = value_and_grad(lambda p, a: sum(apply(p, a) * d["loop_r"]), argnums=(0, 1))(params, d["loop_x"])
    res["loop.y"] = apply(params, d["loop_x"])
    res["loop.gx"] = g[1]
    res["loop.gW"] = g[0]["W"]
    apply, params = onnx.load("while.onnx", split_params=True)
    loss, g = value_and_grad(lambda p, a: sum(apply(p, a) * d["while_r"]), argnums=(0, 1))(params, d["while_x"])
    res["while.y"] = apply(params, d["while_x"])
    res["while.gx"] = g[1]
    res["while.gW"] = g[0]["W"]
    apply, params = onnx.load("scan.onnx", split_params=True)
    rs = d["scan_rs"]
    ry = d["scan_ry"]
    loss, g = value_and_grad(lambda p, s0, xs: sum(apply(p, s0, xs)[0] * rs) + sum(apply(p, s0, xs)[1] * ry), argnums=(0, 2))(
        params, d["scan_s0"], d["scan_xs"])
    s, ys = apply(params, d["scan_s0"], d["scan_xs"])
    res["scan.s"] = s
    res["scan.ys"] = ys
    res["scan.gxs"] = g[1]
    res["scan.gw"] = g[0]["w"]
    save("out.npz", res)
    print("control_flow program: done")
'''


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)) if a.shape == b.shape else float("inf")


def grads(fn, params, inputs, rs):
    ps = [torch.tensor(p, requires_grad=True) for p in params]
    xs = [torch.tensor(x, requires_grad=True) for x in inputs]
    out = fn(*ps, *xs)
    out = out if isinstance(out, tuple) else (out,)
    sum((o * torch.tensor(r)).sum() for o, r in zip(out, rs)).backward()
    return [o.detach().numpy() for o in out], [x.grad.numpy() for x in xs], [p.grad.numpy() if p.grad is not None else np.zeros_like(p.detach().numpy()) for p in ps]


def main():
    tsr = os.path.abspath(sys.argv[1])
    negative = "--negative" in sys.argv
    rng = np.random.default_rng(19)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    W, Wl, Ww, w = f32(4, 4) * 0.5, f32(4, 4) * 0.5, np.abs(f32(4, 4)) * 0.1, f32(4)
    data = {"if_x_pos": np.abs(f32(3, 4)), "if_x_neg": -np.abs(f32(3, 4)), "if_r": f32(3, 4), "loop_x": f32(3, 4), "loop_r": f32(3, 4),
            "while_x": np.abs(f32(4, 4)) * 0.1, "while_r": f32(4, 4), "scan_s0": f32(3, 4), "scan_xs": f32(3, 5, 4), "scan_rs": f32(3, 4),
            "scan_ry": f32(3, 5, 4)}
    failures, pairs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name, m in (("if", if_model(W)), ("loop", loop_model(Wl)), ("while", while_model(Ww)), ("scan", scan_model(w))):
            onnx.save(m, os.path.join(tmp, name + ".onnx"))
        graph = subprocess.run([os.path.join(os.path.dirname(tsr), "..", "tsrc", "tsrc"), "loop.onnx", "--emit=graph"],
                               cwd=tmp, capture_output=True, text=True, timeout=300)
        if graph.stdout.count("= scan ") != 1:
            failures.append(f"the imported Loop is not one scan op:\n{graph.stdout[-2000:]}{graph.stderr}")
        np.savez(os.path.join(tmp, "in.npz"), **data)
        with open(os.path.join(tmp, "cf.tsr"), "w") as f:
            f.write(PROGRAM)
        p = subprocess.run([tsr, "run", "cf.tsr", "--device", "cpu"], cwd=tmp, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            print(f"FAIL: tsr run cf.tsr: exit {p.returncode}\n{p.stdout}{p.stderr}")
            return 1
        print(p.stdout, end="")
        ours = dict(np.load(os.path.join(tmp, "out.npz")))
    if negative:  # PyTorch's side gets other weights and inputs, and its while loop runs one step more
        W, Wl, Ww, w = W * 1.1, Wl * 1.1, Ww * 1.1, w * 1.1
        data = {k: v * np.float32(1.1) if k.endswith(("x", "_pos", "_neg", "s0", "xs")) else v for k, v in data.items()}
        EXTRA_STEPS.append(1)
    for sign in ("pos", "neg"):
        (y,), (gx,), (gW,) = grads(torch_if, [W], [data["if_x_" + sign]], [data["if_r"]])
        pairs += [(f"if ({sign}) output", ours[f"if_{sign}.y"], y), (f"if ({sign}) grad x", ours[f"if_{sign}.gx"], gx)]
        if sign == "pos":  # the else branch does not read W: its gradient is 0 (checked below)
            pairs.append((f"if ({sign}) grad W", ours[f"if_{sign}.gW"], gW))
        elif np.any(ours[f"if_{sign}.gW"] != 0):
            failures.append("if (neg) grad W is not 0")
    (y,), (gx,), (gW,) = grads(torch_loop, [Wl], [data["loop_x"]], [data["loop_r"]])
    pairs += [("loop output", ours["loop.y"], y), ("loop grad x", ours["loop.gx"], gx), ("loop grad W", ours["loop.gW"], gW)]
    (y,), (gx,), (gW,) = grads(torch_while, [Ww], [data["while_x"]], [data["while_r"]])
    if not 2 < WHILE_STEPS[-1] < 10 - len(EXTRA_STEPS):
        failures.append(f"the while loop's condition ends it after {WHILE_STEPS[-1]} of 10 iterations: not a test of the condition")
    print(f"while: PyTorch's loop stops after {WHILE_STEPS[-1]} of 10 iterations")
    pairs += [("while output", ours["while.y"], y), ("while grad x", ours["while.gx"], gx), ("while grad W", ours["while.gW"], gW)]
    (s, ys), (_, gxs), (gw,) = grads(torch_scan, [w], [data["scan_s0"], data["scan_xs"]], [data["scan_rs"], data["scan_ry"]])
    pairs += [("scan state", ours["scan.s"], s), ("scan outputs", ours["scan.ys"], ys), ("scan grad xs", ours["scan.gxs"], gxs),
              ("scan grad w", ours["scan.gw"], gw)]
    passed = 0
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
