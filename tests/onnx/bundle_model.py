#!/usr/bin/env python3
"""A bundle carries the models its program loads with onnx.load (ctest onnx_bundle; issue 19,
docs/bundle.md "models"):

  bundle_model.py TSRC TSR TSR_RUN_BUNDLE

1. A program loads two models: an MLP written with ONNX's helper, by a path relative to the
   program (`models/mlp.onnx`: called from host code, from a @jit function, and split, under
   grad), and the backend data's test_Conv2d copied to an absolute path. Run from source, then
   bundled twice with `tsrc -o`: for `tsr run` without --trace (what it lacks it compiles), and
   with --trace for `tsr-run-bundle` (no compiler, no importer: every program from the bundle).
2. The model files and the program's folder are deleted. Each bundle runs in an empty folder
   (with the data file the program reads; stdlib and TESSERA_PATH at broken modules): its outputs
   must match PyTorch's (MLP, its four gradients: relative error 1e-5), the data set's reference
   output (Conv2d: rtol 1e-3, atol 1e-7) and the source run's (exactly).
3. tsr-run-bundle links neither ONNX nor Protobuf (nm, ldd); the same check finds both in tsr
   (the check's own control).

The negative control (ctest negative_onnx_bundle) makes the writer leave the models out
(TSR_BUNDLE_TEST_SKIP_MODELS=1, a test-only switch): the bundles must then fail to run.
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bundle"))
from torch_python import reexec_with_torch  # noqa: E402
from testlib import skip  # noqa: E402
from bundlerun import COUNT, broken_module_folders  # noqa: E402

reexec_with_torch("onnx_bundle")

import numpy as np  # noqa: E402
import torch  # noqa: E402

try:
    import onnx  # noqa: E402
    from onnx import numpy_helper  # noqa: E402
except ImportError as e:
    skip("onnx_bundle", f"the onnx Python package is missing ({e}; Debian: python3-onnx)")

from language_torch import mlp_model, rel  # noqa: E402  (onnx_language's MLP and its error measure)

CONV = "/usr/share/libonnx-testdata/data/pytorch-converted/test_Conv2d"

PROGRAM = '''f = onnx.load("models/mlp.onnx")
conv = onnx.load("{conv}")

@jit
def doubled(x: Tensor["B", 4, f32]) -> Tensor["B", 3, f32]:
    y, p = f(x)
    return p * 2.0

def main():
    x = load("x.npy")
    y, p = f(x)
    apply, params = onnx.load("models/mlp.onnx", split_params=True)
    g = grad(lambda q, x: mean(apply(q, x)[0] ** 2))(params, x)
    c = conv(load("conv_in.npy"))
    save("out.npz", {{"y": y, "p": p, "doubled": doubled(x), "W1": g["W1"], "b1": g["b1"], "W2": g["W2"], "b2": g["b2"], "conv": c}})
'''


class Tally:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, ok, what):
        if ok:
            self.passed += 1
            print(f"PASS {what}")
        else:
            self.failed += 1
            print(f"FAIL: {what}")
        return ok


def run(cmd, cwd, env=None):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900, env=env)
    return r.returncode, r.stdout + r.stderr


def links_onnx(binary):
    """What of ONNX or Protobuf `binary` has in its symbols or libraries (empty: nothing)."""
    found = []
    nm = subprocess.run(["nm", "-C", binary], capture_output=True, text=True).stdout
    for needle in ("onnx::", "google::protobuf::", "tsr::onnxio::"):
        n = sum(1 for line in nm.splitlines() if needle in line)
        if n:
            found.append(f"{n} symbols of {needle}")
    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    found += [line.split()[0] for line in ldd.splitlines() if "libonnx" in line or "libprotobuf" in line]
    return found


def main():
    tsrc, tsr, runner = (os.path.abspath(a) for a in sys.argv[1:4])
    t = Tally()
    if not os.path.isdir(CONV):
        skip("onnx_bundle", f"{CONV} is missing (Debian: libonnx-testdata)")
    rng = np.random.default_rng(19)
    params = {"W1": rng.standard_normal((4, 16)).astype(np.float32) * 0.5, "b1": rng.standard_normal(16).astype(np.float32) * 0.1,
              "W2": rng.standard_normal((16, 3)).astype(np.float32) * 0.5, "b2": rng.standard_normal(3).astype(np.float32) * 0.1}
    x = rng.standard_normal((5, 4)).astype(np.float32)
    conv_in = numpy_helper.to_array(onnx.load_tensor(os.path.join(CONV, "test_data_set_0", "input_0.pb")))
    conv_ref = numpy_helper.to_array(onnx.load_tensor(os.path.join(CONV, "test_data_set_0", "output_0.pb")))

    # PyTorch's outputs and gradients of the MLP.
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    y = torch.tanh(torch.tensor(x) @ tp["W1"] + tp["b1"]) @ tp["W2"] + tp["b2"]
    p = torch.softmax(y, dim=-1)
    (y ** 2).mean().backward()
    want = {"y": y.detach().numpy(), "p": p.detach().numpy(), "doubled": 2 * p.detach().numpy()}
    want.update({k: tp[k].grad.numpy() for k in params})

    with tempfile.TemporaryDirectory() as work:
        src, data, absdir = (os.path.join(work, d) for d in ("src", "data", "abs"))
        for d in (os.path.join(src, "models"), data, absdir):
            os.makedirs(d)
        mlp_model(os.path.join(src, "models", "mlp.onnx"), params)
        conv_path = os.path.join(absdir, "conv.onnx")
        shutil.copy(os.path.join(CONV, "model.onnx"), conv_path)
        with open(os.path.join(src, "prog.tsr"), "w") as f:
            f.write(PROGRAM.format(conv=conv_path))
        np.save(os.path.join(data, "x.npy"), x)
        np.save(os.path.join(data, "conv_in.npy"), conv_in)

        def outputs(folder):
            path = os.path.join(folder, "out.npz")
            out = dict(np.load(path)) if os.path.exists(path) else None
            if out is not None:
                os.remove(path)
            return out

        # From source, with the models present.
        rc, log = run([tsr, "run", os.path.join(src, "prog.tsr"), "--device", "cpu"], data)
        source = outputs(data)
        if not t.check(rc == 0 and source is not None, f"the program runs from source (exit {rc})"):
            print(log)
            return 1
        # Two bundles, made while the models exist.
        plain, traced = os.path.join(work, "plain.bundle"), os.path.join(work, "traced.bundle")
        for out, extra in ((plain, []), (traced, ["--trace", ""])):
            rc, log = run([tsrc, os.path.join(src, "prog.tsr"), "-o", out, "--target", "cpu"] + extra, data)
            if not t.check(rc == 0, f"tsrc -o {os.path.basename(out)} {' '.join(extra)} (exit {rc})"):
                print(log)
                return 1
        # The models and the program's folder are gone.
        shutil.rmtree(src)
        shutil.rmtree(absdir)
        stdlib, path = broken_module_folders(os.path.join(work, "broken"))
        env = dict(os.environ, TESSERA_STDLIB=stdlib, TESSERA_PATH=path, TSR_BUNDLE_VERBOSE="1")
        for name, cmd in (("tsr run plain.bundle", [tsr, "run", plain, "--device", "cpu"]),
                          ("tsr-run-bundle traced.bundle", [runner, traced, "--device", "cpu"])):
            empty = os.path.join(work, "run-" + name.split()[0])
            os.makedirs(empty)
            shutil.copy(os.path.join(data, "x.npy"), empty)
            shutil.copy(os.path.join(data, "conv_in.npy"), empty)
            rc, log = run(cmd, empty, env)
            got = outputs(empty)
            if not t.check(rc == 0 and got is not None, f"{name} without the model files (exit {rc})"):
                print(log.strip()[-3000:])
                t.failed += len(want) + 2
                continue
            for k, w in want.items():
                e = rel(got[k], w) if k in got and got[k].shape == w.shape else float("inf")
                t.check(e <= 1e-5, f"{name}: mlp {k} against PyTorch: rel {e:.2g}")
            c = got.get("conv")
            t.check(c is not None and c.shape == conv_ref.shape and np.allclose(c, conv_ref, rtol=1e-3, atol=1e-7),
                    f"{name}: Conv2d against the data set's output: max abs diff "
                    f"{np.max(np.abs(c - conv_ref)) if c is not None and c.shape == conv_ref.shape else '-'}")
            same = all(k in got and np.array_equal(got[k], source[k]) for k in source)
            t.check(same, f"{name}: every output equal to the source run's")
            if name.startswith("tsr-run-bundle"):
                m = COUNT.search(log)
                t.check(m is not None and int(m.group(2)) == 0 and int(m.group(1)) > 0,
                        f"{name}: every program from the bundle ({m.group(0) if m else 'no count line'})")

    # The runner without a compiler has no importer either; the check finds the one tsr links.
    t.check(not links_onnx(runner), f"tsr-run-bundle links no ONNX or Protobuf ({', '.join(links_onnx(runner)) or 'none'})")
    found = links_onnx(tsr)
    t.check(bool(found), f"the same check finds the importer in tsr ({', '.join(found) or 'nothing'})")
    print(f"{t.passed} passed, {t.failed} failed")
    return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())
