#!/usr/bin/env python3
"""Convolution and pooling (nn.conv1d/2d/3d, nn.conv_transpose1d/2d/3d, nn.max_pool1d/2d/3d,
nn.avg_pool1d/2d/3d, nn.global_avg_pool, nn.global_max_pool) against torch.nn.functional
(ctest conv_torch).

  conv_torch.py TSR [--executor compiled|reference] [--device cpu|cuda] [--negative]

Each case draws its inputs and a random cotangent r, and a generated program (`tsr run`) computes
the output and value_and_grad of sum(out * r) with respect to every tensor input, in f32 and in
f64; PyTorch computes the same with torch.autograd. The 26 cases cover strides, symmetric,
explicit asymmetric and "same" padding, dilation, groups (depthwise too), 1 to 3 spatial axes,
ceil_mode and count_include_pad, vmap (a mapped input folded into N, a mapped weight, per-example
gradients through max_pool) and a small LeNet-like block. Tolerances: relative error (the difference's norm over PyTorch's) 1e-5 in
f32, 1e-10 in f64 (measured below 1e-6 and 1e-15). --executor picks the executor (the compiled
executor by default; `reference` the evaluator), --device where the compiled executor runs (cpu by
default; cuda: a GPU, the GPU suite's step conv_torch_cuda).

On the compiled executor the ops run as window steps (ir/schedule/LowerWindow.cpp: one compiled
program per op, docs/ir.md; on the CPU under TSR_WINDOW_STEPS=1, which the test sets unless the
environment gives it), and the run's profile (`tsr run --profile`) must show it: launches of
`window` programs, and no library step of conv, conv_transpose or a pool op (`FAIL: window steps`
otherwise; TSR_TEST_FORCE_INTERPRET=1, which runs every kernel step on the evaluator, is that
check's control: ctest negative_conv_torch_window_steps).

--negative is the control: PyTorch's side of every case computes something subtly different
(the kernel flipped, the pool's count_include_pad toggled, a min pool instead of a max pool, the
stride of a transposed convolution's output padding dropped), and every case must then fail.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from testlib import summary  # noqa: E402
from torch_python import reexec_with_torch  # noqa: E402

reexec_with_torch("conv_torch")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# (name, tensor inputs {name: shape}, the Tessera expression over p["..."], torch function of
# the inputs, torch function under --negative)
def _grad_of(f, x):
    """torch's gradient of f at x, itself differentiable (create_graph) where x requires grad."""
    a = x if x.requires_grad else x.detach().requires_grad_()
    return torch.autograd.grad(f(a), a, create_graph=True)[0]


def flip(w):
    return torch.flip(w, dims=list(range(2, w.dim())))


CASES = [
    ("conv2d_stride_pad_bias", {"x": (2, 3, 9, 8), "w": (4, 3, 3, 3), "b": (4,)},
     'nn.conv2d(p["x"], p["w"], p["b"], stride=2, padding=1)',
     lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
     lambda x, w, b: F.conv2d(x, flip(w), b, stride=2, padding=1)),
    ("conv2d_groups_dilation", {"x": (2, 4, 10, 9), "w": (6, 2, 3, 2)},
     'nn.conv2d(p["x"], p["w"], stride=(1, 2), padding=(1, 2), dilation=2, groups=2)',
     lambda x, w: F.conv2d(x, w, stride=(1, 2), padding=(1, 2), dilation=2, groups=2),
     lambda x, w: F.conv2d(x, flip(w), stride=(1, 2), padding=(1, 2), dilation=2, groups=2)),
    ("conv2d_explicit_pads", {"x": (1, 2, 7, 6), "w": (3, 2, 3, 3)},
     'nn.conv2d(p["x"], p["w"], padding=(0, 2, 1, 1), stride=2)',  # begins (0, 2), ends (1, 1)
     lambda x, w: F.conv2d(F.pad(x, (2, 1, 0, 1)), w, stride=2),
     lambda x, w: F.conv2d(F.pad(x, (2, 1, 0, 1)), flip(w), stride=2)),
    ("conv2d_same_even_kernel", {"x": (2, 2, 6, 7), "w": (2, 2, 4, 2)},
     'nn.conv2d(p["x"], p["w"], padding="same")',
     lambda x, w: F.conv2d(x, w, padding="same"),
     lambda x, w: F.conv2d(x, flip(w), padding="same")),
    ("conv1d_depthwise", {"x": (3, 3, 17), "w": (6, 1, 4), "b": (6,)},
     'nn.conv1d(p["x"], p["w"], p["b"], stride=3, padding=2, groups=3)',
     lambda x, w, b: F.conv1d(x, w, b, stride=3, padding=2, groups=3),
     lambda x, w, b: F.conv1d(x, flip(w), b, stride=3, padding=2, groups=3)),
    ("conv3d", {"x": (1, 2, 5, 6, 4), "w": (3, 2, 2, 3, 2), "b": (3,)},
     'nn.conv3d(p["x"], p["w"], p["b"], stride=(2, 1, 1), padding=(1, 0, 1))',
     lambda x, w, b: F.conv3d(x, w, b, stride=(2, 1, 1), padding=(1, 0, 1)),
     lambda x, w, b: F.conv3d(x, flip(w), b, stride=(2, 1, 1), padding=(1, 0, 1))),
    ("conv_transpose2d", {"x": (2, 4, 5, 4), "w": (4, 3, 3, 3), "b": (6,)},
     'nn.conv_transpose2d(p["x"], p["w"], p["b"], stride=2, padding=1, output_padding=1, groups=2)',
     lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2),
     lambda x, w, b: F.conv_transpose2d(x, flip(w), b, stride=2, padding=1, output_padding=1, groups=2)),
    ("conv_transpose2d_dilation", {"x": (1, 2, 4, 5), "w": (2, 2, 2, 3)},
     'nn.conv_transpose2d(p["x"], p["w"], stride=(1, 2), dilation=2, padding=(0, 1))',
     lambda x, w: F.conv_transpose2d(x, w, stride=(1, 2), dilation=2, padding=(0, 1)),
     lambda x, w: F.conv_transpose2d(x, flip(w), stride=(1, 2), dilation=2, padding=(0, 1))),
    ("conv_transpose1d", {"x": (2, 3, 6), "w": (3, 2, 4), "b": (2,)},
     'nn.conv_transpose1d(p["x"], p["w"], p["b"], stride=3, padding=2, output_padding=1)',
     lambda x, w, b: F.conv_transpose1d(x, w, b, stride=3, padding=2, output_padding=1),
     lambda x, w, b: F.conv_transpose1d(x, flip(w), b, stride=3, padding=2, output_padding=1)),
    ("conv_transpose3d", {"x": (1, 2, 3, 4, 3), "w": (2, 2, 2, 3, 2)},
     'nn.conv_transpose3d(p["x"], p["w"], stride=(1, 2, 2), padding=(0, 1, 0), groups=2)',
     lambda x, w: F.conv_transpose3d(x, w, stride=(1, 2, 2), padding=(0, 1, 0), groups=2),
     lambda x, w: F.conv_transpose3d(x, flip(w), stride=(1, 2, 2), padding=(0, 1, 0), groups=2)),
    ("max_pool2d_ceil", {"x": (2, 3, 9, 8)},
     'nn.max_pool2d(p["x"], 3, stride=2, padding=1, ceil_mode=True)',
     lambda x: F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True),
     lambda x: -F.max_pool2d(-x, 3, stride=2, padding=1, ceil_mode=True)),
    ("max_pool2d_dilation", {"x": (1, 2, 10, 9)},
     'nn.max_pool2d(p["x"], (2, 3), stride=(2, 1), dilation=(2, 1))',
     lambda x: F.max_pool2d(x, (2, 3), stride=(2, 1), dilation=(2, 1)),
     lambda x: -F.max_pool2d(-x, (2, 3), stride=(2, 1), dilation=(2, 1))),
    ("max_pool1d", {"x": (2, 3, 11)},
     'nn.max_pool1d(p["x"], 4, stride=3, padding=2)',
     lambda x: F.max_pool1d(x, 4, stride=3, padding=2),
     lambda x: -F.max_pool1d(-x, 4, stride=3, padding=2)),
    ("max_pool3d", {"x": (1, 2, 4, 5, 6)},
     'nn.max_pool3d(p["x"], 2)',
     lambda x: F.max_pool3d(x, 2),
     lambda x: -F.max_pool3d(-x, 2)),
    ("avg_pool2d_ceil_exclude_pad", {"x": (2, 3, 9, 8)},
     'nn.avg_pool2d(p["x"], 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)',
     lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
     lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=True)),
    ("avg_pool2d_include_pad", {"x": (2, 2, 7, 7)},
     'nn.avg_pool2d(p["x"], (3, 2), stride=(2, 3), padding=1, ceil_mode=True)',
     lambda x: F.avg_pool2d(x, (3, 2), stride=(2, 3), padding=1, ceil_mode=True),
     lambda x: F.avg_pool2d(x, (3, 2), stride=(2, 3), padding=1, ceil_mode=True, count_include_pad=False)),
    ("avg_pool1d", {"x": (2, 3, 10)},
     'nn.avg_pool1d(p["x"], 3, stride=2, padding=1)',
     lambda x: F.avg_pool1d(x, 3, stride=2, padding=1),
     lambda x: F.avg_pool1d(x, 3, stride=2, padding=1, count_include_pad=False)),
    ("avg_pool3d", {"x": (1, 2, 4, 5, 6)},
     'nn.avg_pool3d(p["x"], 2, stride=1, padding=1)',
     lambda x: F.avg_pool3d(x, 2, stride=1, padding=1),
     lambda x: F.avg_pool3d(x, 2, stride=1, padding=1, count_include_pad=False)),
    ("global_avg_pool", {"x": (2, 3, 5, 4)},
     'nn.global_avg_pool(p["x"])',
     lambda x: F.adaptive_avg_pool2d(x, 1),
     lambda x: F.adaptive_avg_pool2d(x, 1) * 1.01),
    ("global_max_pool", {"x": (2, 3, 5, 4)},
     'nn.global_max_pool(p["x"])',
     lambda x: F.adaptive_max_pool2d(x, 1),
     lambda x: -F.adaptive_max_pool2d(-x, 1)),
    # vmap (ir/autodiff/WindowRules.cpp's batching: the mapped axis folded into N; a mapped conv
    # weight once per example) and gradients through it
    ("vmap_conv2d", {"x": (3, 2, 3, 7, 6), "w": (4, 3, 3, 3)},
     'vmap(lambda a, b: nn.conv2d(a, b, padding=1, stride=(2, 1)), in_axes=(0, None))(p["x"], p["w"])',
     lambda x, w: torch.stack([F.conv2d(x[i], w, padding=1, stride=(2, 1)) for i in range(3)]),
     lambda x, w: torch.stack([F.conv2d(x[i], flip(w), padding=1, stride=(2, 1)) for i in range(3)])),
    ("vmap_conv_weight", {"x": (2, 3, 6, 6), "w": (2, 4, 3, 3, 3)},
     'vmap(lambda b, a: conv(a, b, stride=2), in_axes=(0, None))(p["w"], p["x"])',
     lambda x, w: torch.stack([F.conv2d(x, w[i], stride=2) for i in range(2)]),
     lambda x, w: torch.stack([F.conv2d(x, flip(w[i]), stride=2) for i in range(2)])),
    ("vmap_conv_transpose", {"x": (2, 1, 2, 4, 4), "w": (2, 3, 3, 3)},
     'vmap(lambda a, b: nn.conv_transpose2d(a, b, stride=2, padding=1), in_axes=(0, None))(p["x"], p["w"])',
     lambda x, w: torch.stack([F.conv_transpose2d(x[i], w, stride=2, padding=1) for i in range(2)]),
     lambda x, w: torch.stack([F.conv_transpose2d(x[i], flip(w), stride=2, padding=1) for i in range(2)])),
    ("vmap_pools", {"x": (2, 1, 2, 7, 7)},
     'vmap(lambda a: nn.avg_pool2d(nn.max_pool2d(a, 3, stride=2, padding=1), 2, padding=1, count_include_pad=False))(p["x"])',
     lambda x: torch.stack([F.avg_pool2d(F.max_pool2d(x[i], 3, stride=2, padding=1), 2, padding=1, count_include_pad=False) for i in range(2)]),
     lambda x: torch.stack([F.avg_pool2d(F.max_pool2d(x[i], 3, stride=2, padding=1), 2, padding=1) for i in range(2)])),
    ("vmap_grad_max_pool", {"x": (3, 2, 2, 6, 6)},
     'vmap(grad(_squared_pool))(p["x"])',
     lambda x: torch.stack([_grad_of(lambda a: F.max_pool2d(a * a, 2, stride=1).sum(), x[i]) for i in range(3)]),
     lambda x: torch.stack([_grad_of(lambda a: -F.max_pool2d(-(a * a), 2, stride=1).sum(), x[i]) for i in range(3)])),
    ("lenet_block", {"x": (2, 1, 12, 12), "w1": (4, 1, 5, 5), "b1": (4,), "w2": (6, 2, 3, 3)},
     'nn.avg_pool2d(nn.conv2d(nn.max_pool2d(tanh(nn.conv2d(p["x"], p["w1"], p["b1"], padding=2)), 2), p["w2"], groups=2), 2)',
     lambda x, w1, b1, w2: F.avg_pool2d(F.conv2d(F.max_pool2d(torch.tanh(F.conv2d(x, w1, b1, padding=2)), 2), w2, groups=2), 2),
     lambda x, w1, b1, w2: F.avg_pool2d(F.conv2d(F.max_pool2d(torch.tanh(F.conv2d(x, flip(w1), b1, padding=2)), 2), w2, groups=2), 2)),
]


def rel(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def program(cases):
    lines = ["import nn", "", "", "def _squared_pool(a):", "    return sum(nn.max_pool2d(a * a, 2, stride=1))", "", "",
             'def main(inputs: str = "in.npz", out: str = "out.npz"):', "    d = load(inputs)", "    res = {}"]
    for tag, (name, shapes, expr, _, _) in cases:
        names = list(shapes)
        lines.append(f"    # {name}")
        lines.append(f"    p{tag} = {{" + ", ".join(f'"{n}": d["{tag}.{n}"]' for n in names) + "}")
        lines.append(f"    r{tag} = d[\"{tag}.r\"]")
        lines.append(f"    y{tag}, g{tag} = value_and_grad(lambda p: sum({expr} * r{tag}))(p{tag})")
        lines.append(f"    res[\"{tag}.y\"] = (lambda p: {expr})(p{tag})")
        for n in names:
            lines.append(f"    res[\"{tag}.g.{n}\"] = g{tag}[\"{n}\"]")
    lines.append("    save(out, res)")
    lines.append('    print(f"conv_torch program: {len(res)} tensors")')
    return "\n".join(lines) + "\n"


WINDOW_OPS = ("conv", "conv_transpose", "max_pool", "max_pool_grad", "avg_pool", "avg_pool_grad")


def window_steps(trace):
    """(launches of window programs, library steps of window ops) in a `tsr run --profile` trace."""
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    launches = sum(1 for e in events if e.get("cat") == "launch" and str(e.get("name", "")).startswith("window"))
    library = sum(1 for e in events if e.get("cat") == "step" and len(str(e.get("name", "")).split()) == 4
                  and str(e["name"]).split()[2] == "library" and str(e["name"]).split()[3] in WINDOW_OPS)
    return launches, library


def main():
    tsr = os.path.abspath(sys.argv[1])
    negative = "--negative" in sys.argv
    executor = sys.argv[sys.argv.index("--executor") + 1] if "--executor" in sys.argv else "compiled"
    device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cpu"
    rng = np.random.default_rng(19)
    passed = failed = case_failed = 0
    for dtype, tol in ((np.float32, 1e-5), (np.float64, 1e-10)):
        cases, arrays, refs = [], {}, {}
        for i, case in enumerate(CASES):
            tag = f"c{i}"
            name, shapes, _, ref, bad = case
            ins = {n: rng.standard_normal(s).astype(dtype) for n, s in shapes.items()}
            ts = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in ins.items()}
            y = (bad if negative else ref)(*ts.values())
            r = rng.standard_normal(tuple(y.shape)).astype(dtype)
            (y * torch.tensor(r, dtype=torch.float64)).sum().backward()
            for n, v in ins.items():
                arrays[f"{tag}.{n}"] = v
                refs[f"{tag}.g.{n}"] = ts[n].grad.numpy()
            arrays[f"{tag}.r"] = r
            refs[f"{tag}.y"] = y.detach().numpy()
            cases.append((tag, case))
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "conv_cases.tsr")
            with open(src, "w") as f:
                f.write(program(cases))
            np.savez(os.path.join(tmp, "in.npz"), **arrays)
            env = dict(os.environ, TSR_EXECUTOR=executor)
            # On the CPU the window programs run only under TSR_WINDOW_STEPS=1 (exec/CompiledExecutor.h:
            # the evaluator's im2col is faster there); the test checks the programs a GPU runs.
            env.setdefault("TSR_WINDOW_STEPS", "1")
            trace = os.path.join(tmp, "trace.json")
            cmd = [tsr, "run", src, "--device", device] + (["--profile", trace] if executor == "compiled" else []) + [
                "--inputs", os.path.join(tmp, "in.npz"), "--out", os.path.join(tmp, "out.npz")]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=tmp)
            if p.returncode != 0:
                print(f"FAIL: {' '.join(cmd)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
                return 1
            ours = dict(np.load(os.path.join(tmp, "out.npz")))
            dt = np.dtype(dtype).name
            if executor == "compiled":
                launches, library = window_steps(trace)
                ok = launches > 0 and library == 0
                passed += ok
                failed += not ok
                print(f"{'ok  ' if ok else 'FAIL: window steps'} {dt} ({executor}, {device}): {launches} launches of window "
                      f"programs, {library} library steps of conv or pool ops")
        for tag, (name, shapes, _, _, _) in cases:
            keys = [f"{tag}.y"] + [f"{tag}.g.{n}" for n in shapes]
            errs = {k.split(".", 1)[1]: rel(ours[k], refs[k]) for k in keys}
            if ours[f"{tag}.y"].dtype != np.dtype(dtype):
                errs["dtype"] = float("inf")
            worst = max(errs.values())
            ok = worst <= tol
            passed += ok
            failed += not ok
            case_failed += not ok
            detail = ", ".join(f"{k} {v:.1e}" for k, v in errs.items())
            print(f"{'ok  ' if ok else 'FAIL'} {name} {dt} ({executor}, {device}): {detail} (tolerance {tol:.0e})")
    if negative:
        # The control: every case must have failed against the altered references (the window
        # steps' check, which does not depend on them, aside).
        print(f"negative: {case_failed} of {2 * len(CASES)} cases failed")
        return 1 if case_failed == 2 * len(CASES) else 0
    return summary(passed, failed, minimum=2 * len(CASES))


if __name__ == "__main__":
    sys.exit(main())
