"""What the tests of models exported from PyTorch share (tests/onnx/torch_cnn.py, torch_rnn.py,
torch_transformer.py): the Tessera program that loads the exported model with
`onnx.load(..., split_params=True)` and computes its output and value_and_grad of sum(y * r) with
respect to the parameters and the input; running it with `tsr run` on inputs saved beside it; the
imported Graph IR (`tsrc FILE --emit=graph`); and the comparisons with torch.autograd (relative
error, printed one per line, counted into the failures)."""
import os
import subprocess

import numpy as np

PROGRAM = '''def main():
    apply, params = onnx.load("{model}", split_params=True)
    d = load("in.npz")
    x = d["x"]
    r = d["r"]
    loss, grads = value_and_grad(lambda p, a: sum(apply(p, a) * r), argnums=(0, 1))(params, x)
    res = {{"y": apply(params, x), "g.x": grads[1]}}
    for name, g in grads[0].items():
        res["g." + name] = g
    save("out.npz", res)
    print(f"{tag} program: loss {{item(loss):.6f}}")
'''


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)) if a.shape == b.shape else float("inf")


def imported_graph(tsr, tmp, model):
    """`tsrc MODEL --emit=graph` in `tmp` (tsrc beside tsr's build folder): (stdout, stderr)."""
    g = subprocess.run([os.path.join(os.path.dirname(tsr), "..", "tsrc", "tsrc"), model, "--emit=graph"],
                       cwd=tmp, capture_output=True, text=True, timeout=300)
    return g.stdout, g.stderr


def run_program(tsr, tmp, model, tag, x, r):
    """Saves x and r, writes the program for `model` (a file in `tmp`) and runs it on the CPU: the
    outputs it saved (name -> array: "y", "g.x", "g.PARAM"), or None after printing why it failed."""
    np.savez(os.path.join(tmp, "in.npz"), x=x.numpy(), r=r.numpy())
    source = os.path.join(tmp, tag + ".tsr")
    with open(source, "w") as f:
        f.write(PROGRAM.format(model=model, tag=tag))
    p = subprocess.run([tsr, "run", os.path.basename(source), "--device", "cpu"], cwd=tmp, capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0:
        print(f"FAIL: tsr run {os.path.basename(source)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
        return None
    print(p.stdout, end="")
    return dict(np.load(os.path.join(tmp, "out.npz")))


def compare(pairs, failures, tolerance=1e-5):
    """Each (name, ours, PyTorch's) within `tolerance` relative error: a line each; a failure is
    appended to `failures`. Returns how many passed."""
    passed = 0
    for name, a, b in pairs:
        e = rel(a, b)
        ok = e <= tolerance
        passed += ok
        if not ok:
            failures.append(f"{name} differs: relative error {e:.3e} > {tolerance:.0e}")
        print(f"{'ok  ' if ok else 'FAIL'} {name}: relative error {e:.2e}")
    return passed
