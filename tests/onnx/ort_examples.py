#!/usr/bin/env python3
"""ONNX Runtime runs the exported model of every examples/ graph function (issue 19; GPU suite
steps onnx_ort_examples and negative_onnx_ort_examples; ctests onnx_ort_examples_cpu and
negative_onnx_ort_examples_cpu with ORT_FAKE=numpy).

  ort_examples.py TSR TSRC [--device cpu|cuda] [--negative] [--also FILE.tsr]...

For each graph function of examples/*.tsr and of the programs in examples/*/ (the functions of
each file's own module, from `tsrc FILE --emit=types`), and of each --also file
(tests/onnx/ort_fixture.tsr: a tuple of outputs, a bf16 function that needs --specialize):
  1. `tsrc FILE --entry NAME --emit=onnx -o NAME.onnx`, its symbols kept as dim_params; when the
     exporter asks for sizes, again with `--specialize SYM=INT` for each symbol of the signature.
     A function that does not export is one `SKIP` line with tsrc's diagnostic.
  2. Inputs of the model's input dtypes and shapes (symbols bound to small distinct sizes) saved
     as .npy (bf16 as its f32 values, each exactly a bf16).
  3. Tessera's outputs: `tsr run` of a generated driver in a copy of the example's folder that
     imports the module, loads the inputs (cast to bf16 where the model takes bf16), calls the
     function and saves its outputs to an .npz (bf16 outputs cast to f32), as export_roundtrip.py
     does.
  4. ONNX Runtime's outputs: onnxruntime.InferenceSession with CPUExecutionProvider, and with
     --device cuda also CUDAExecutionProvider (when this onnxruntime has it; else a NOTE line).
     bf16 crosses the model's boundary as f32 (a Cast to bf16 after each bf16 input, a Cast to
     f32 after each bf16 output): NumPy has no bf16, and the casts are exact for these values.
  5. Comparison: |ort - tsr| <= atol + rtol |tsr| elementwise, rtol = atol = 1e-4 when the model
     computes in f32/f64 only, 2e-2 when it computes in bf16 or f16 (an output, an initializer or
     a Cast's target of that dtype); integers and booleans
     exactly; shapes equal.
`tsr run` runs on --device (default cpu).

Prints one `PASS`, `FAIL` or `SKIP` line per function and `N passed, N failed, N skipped`; exits 1
on any failure or when nothing passed; without onnxruntime: `SKIP ort_examples: onnxruntime is not
installed` (exit 77; 1 under TSR_REQUIRE_PREREQS=1).

A provider without a kernel for one of the model's ops at its dtypes (ONNX Runtime's
NOT_IMPLEMENTED: its CPU provider has no bf16 MatMul) is noted on the function's line; a function
that no provider runs is a SKIP line naming why.

ORT_FAKE=numpy evaluates the models with export_roundtrip.py's NumPy interpreter of the ONNX
operators instead of onnxruntime (a machine without onnxruntime exercises the discovery, export,
inputs, `tsr run` and comparison): a model using an operator that interpreter lacks is a SKIP
line; bf16 is carried as f32 there.

--negative is the control: each exported model's first Add (of its graph, else of a Scan's body)
becomes a Sub (a model without Add: its first Sub becomes an Add; without either, its first
output is negated by an added Neg) before it runs; every compared function must FAIL.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from testlib import skip  # noqa: E402
from torch_python import reexec_with_torch  # noqa: E402

NAME = "ort_examples"
reexec_with_torch(NAME)  # an interpreter with numpy (and onnx)

import numpy as np  # noqa: E402

try:
    import onnx
    from onnx import TensorProto, helper
except ImportError as e:
    skip(NAME, f"the onnx Python package is missing ({e})")

FAKE = os.environ.get("ORT_FAKE", "")
ort = None
if FAKE == "numpy":
    import export_roundtrip  # noqa: E402  (its NumPy interpreter of the ONNX operators)
    export_roundtrip._ELEM.setdefault(TensorProto.BFLOAT16, np.float32)  # bf16 carried as f32
elif FAKE:
    print(f"ort_examples: ORT_FAKE={FAKE}: only ORT_FAKE=numpy is known", file=sys.stderr)
    sys.exit(2)
else:
    try:
        import onnxruntime as ort
    except ImportError:
        skip(NAME, "onnxruntime is not installed")

SIZES = [6, 5, 7, 4, 3, 8, 9, 2]  # the symbols' sizes, in order of appearance (distinct: a swapped axis shows)
LOW = {TensorProto.BFLOAT16, TensorProto.FLOAT16}
NP = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64, TensorProto.FLOAT16: np.float16,
      TensorProto.BFLOAT16: np.float32, TensorProto.INT32: np.int32, TensorProto.INT64: np.int64,
      TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8, TensorProto.BOOL: np.bool_}
TSR_DTYPE = {TensorProto.BFLOAT16: "bf16"}


def run(cmd, cwd=None, timeout=600):
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", f"timed out after {timeout} s")


def first_error(text):
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln:
            return ln
    return lines[0] if lines else "(no output)"


def graph_functions(tsrc, path):
    """[(name, [symbols])] of the graph functions of `path`'s own module (tsrc --emit=types)."""
    r = run([tsrc, path, "--emit=types"])
    if r.returncode != 0:
        return None, first_error(r.stderr + r.stdout)
    stem = os.path.splitext(os.path.basename(path))[0]
    out, module, last = [], None, None
    for line in r.stdout.splitlines():
        m = re.match(r"^module (\S+)", line)
        if m:
            module = m.group(1)
            continue
        if module != stem:
            continue
        m = re.match(r"^  graph function (\w+)\(", line)
        if m:
            last = (m.group(1), [])
            out.append(last)
            continue
        m = re.match(r"^    symbols: (.*)$", line)
        if m and last is not None:
            last[1].extend(m.group(1).split())
    return out, None


def bf16_round(x):
    """f32 values rounded to the nearest bf16 (ties to even), kept as f32."""
    b = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.astype(np.uint32).view(np.float32)


def make_input(rng, elem, shape):
    if elem in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16):
        x = (rng.standard_normal(shape) * 0.5).astype(np.float32)
        if elem == TensorProto.BFLOAT16:
            return bf16_round(x)
        return x.astype(NP[elem])
    if elem == TensorProto.BOOL:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if elem in NP:
        return rng.integers(0, 3, shape).astype(NP[elem])
    return None


def bf16_boundary(model):
    """The model with f32 at its bf16 inputs and outputs (Casts inside; exact for bf16 values)."""
    g = model.graph
    front, back = [], []
    for v in g.input:
        tt = v.type.tensor_type
        if tt.elem_type == TensorProto.BFLOAT16:
            inner = v.name + "__bf16"
            for n in g.node:
                n.input[:] = [inner if i == v.name else i for i in n.input]
            for o in g.output:
                if o.name == v.name:
                    raise RuntimeError("an input passed through as an output")
            front.append(helper.make_node("Cast", [v.name], [inner], to=TensorProto.BFLOAT16))
            tt.elem_type = TensorProto.FLOAT
    for o in g.output:
        tt = o.type.tensor_type
        if tt.elem_type == TensorProto.BFLOAT16:
            inner = o.name + "__bf16"
            for n in g.node:
                n.output[:] = [inner if x == o.name else x for x in n.output]
            back.append(helper.make_node("Cast", [inner], [o.name], to=TensorProto.FLOAT))
            tt.elem_type = TensorProto.FLOAT
    nodes = front + list(g.node) + back
    del g.node[:]
    g.node.extend(nodes)
    return model


def perturb(model):
    """The control: the first Add becomes Sub (graph, else a Scan body); else the first Sub an
    Add; else a Neg of the first output. Returns what it did."""
    g = model.graph
    bodies = [helper.get_attribute_value(a) for n in g.node if n.op_type == "Scan" for a in n.attribute if a.name == "body"]
    for src, dst in (("Add", "Sub"), ("Sub", "Add")):
        nodes = [n for gr in [g] + bodies for n in gr.node if n.op_type == src]
        if nodes:
            nodes[0].op_type = dst
            return f"first {src} -> {dst}"
    o = g.output[0]
    inner = o.name + "__unneg"
    for n in g.node:
        n.output[:] = [inner if x == o.name else x for x in n.output]
    g.node.append(helper.make_node("Neg", [inner], [o.name]))
    return "first output negated (no Add or Sub)"


def model_dtypes(model):
    """The element types the model computes in: its outputs', its initializers' and its Casts'
    targets (a bf16 input cast to f32 at once is computed in f32)."""
    ts = {v.type.tensor_type.elem_type for v in model.graph.output}
    ts |= {i.data_type for i in model.graph.initializer}
    for n in model.graph.node:
        for a in n.attribute:
            if n.op_type == "Cast" and a.name == "to":
                ts.add(a.i)
    return ts


def run_model(model_bytes, feeds, providers):
    if ort is None:
        m = onnx.load_from_string(model_bytes)
        names = [i.name for i in m.graph.input]
        return export_roundtrip.run_onnx(m, {k: feeds[k] for k in names})
    s = ort.InferenceSession(model_bytes, providers=providers)
    used = s.get_providers()
    first = providers[0] if isinstance(providers[0], str) else providers[0][0]
    if first not in used:
        raise RuntimeError(f"the session runs on {used}, not {first}")
    return s.run(None, feeds)


def pname(prov):
    return (prov[0] if isinstance(prov[0], str) else prov[0][0]).replace("ExecutionProvider", "")


def compare(got, want, tol):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False, f"shape {got.shape} vs Tessera's {want.shape}"
    if want.dtype.kind in "biu":
        bad = int(np.sum(got.astype(np.int64) != want.astype(np.int64)))
        return bad == 0, f"{bad} elements differ (exact)"
    g, w = got.astype(np.float64), want.astype(np.float64)
    err = np.abs(g - w)
    ok = err <= tol + tol * np.abs(w)
    ok |= np.isnan(g) & np.isnan(w)
    worst = float(np.max(err / (tol + tol * np.abs(w)))) if err.size else 0.0
    return bool(np.all(ok)), f"max |diff| {float(np.max(err)) if err.size else 0.0:.2g} ({worst:.2g} of tolerance {tol:g})"


def main():
    args = sys.argv[1:]
    negative = "--negative" in args
    device = "cpu"
    if "--device" in args:
        device = args[args.index("--device") + 1]
    also = [os.path.abspath(args[i + 1]) for i, a in enumerate(args[:-1]) if a == "--also"]
    pos = [a for i, a in enumerate(args) if not a.startswith("--") and (i == 0 or args[i - 1] not in ("--device", "--also"))]
    if len(pos) != 2 or device not in ("cpu", "cuda"):
        print("usage: ort_examples.py TSR TSRC [--device cpu|cuda] [--negative] [--also FILE.tsr]...", file=sys.stderr)
        return 2
    tsr, tsrc = (os.path.abspath(p) for p in pos)
    providers = [["CPUExecutionProvider"]]
    if ort is not None:
        print(f"onnxruntime {ort.__version__}, providers {ort.get_available_providers()}")
        if device == "cuda":
            if "CUDAExecutionProvider" in ort.get_available_providers():
                # TF32 off: ONNX Runtime's f32 products exact to f32, like Tessera's.
                providers.append([("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"])
            else:
                print("NOTE: this onnxruntime has no CUDAExecutionProvider; the CPU provider only")
    else:
        print("ORT_FAKE=numpy: models evaluated by export_roundtrip.py's NumPy interpreter, not onnxruntime")
    examples = os.path.join(ROOT, "examples")
    files = sorted(glob.glob(os.path.join(examples, "*.tsr"))) + sorted(glob.glob(os.path.join(examples, "*", "*.tsr"))) + also
    only = os.environ.get("ORT_EXAMPLES_ONLY", "").split()  # "examples/gemm.tsr:reference ...": only these
    passed = failed = skipped = 0
    rng = np.random.default_rng(19)
    with tempfile.TemporaryDirectory() as work:
        for path in files:
            rel = os.path.relpath(path, ROOT)
            fns, err = graph_functions(tsrc, path)
            if fns is None:
                failed += 1
                print(f"FAIL {rel}: tsrc --emit=types: {err}")
                continue
            for name, symbols in fns:
                label = f"{rel}:{name}"
                if only and label not in only:
                    continue
                d = os.path.join(work, f"{len(os.listdir(work))}_{name}")
                os.makedirs(d)
                out = os.path.join(d, name + ".onnx")
                sizes = {s: SIZES[k % len(SIZES)] for k, s in enumerate(dict.fromkeys(symbols))}
                r = run([tsrc, path, "--entry", name, "--emit=onnx", "-o", out])
                spec = []
                if r.returncode != 0 and "specialized to sizes" in r.stderr and sizes:
                    spec = [a for s, v in sizes.items() for a in ("--specialize", f"{s}={v}")]
                    r = run([tsrc, path, "--entry", name, "--emit=onnx", "-o", out] + spec)
                if r.returncode != 0 or not os.path.exists(out):
                    if r.returncode not in (1, 2):  # a crash or an internal error is no reason to skip
                        failed += 1
                        print(f"FAIL {label}: tsrc --emit=onnx exited {r.returncode}: {first_error(r.stderr + r.stdout)}")
                    else:
                        skipped += 1
                        print(f"SKIP {label}: does not export: {first_error(r.stderr + r.stdout)}")
                    continue
                model = onnx.load(out)
                try:
                    onnx.checker.check_model(model, full_check=True)
                except Exception as e:  # noqa: BLE001 - the checker's errors are of several classes
                    failed += 1
                    print(f"FAIL {label}: the exported model fails ONNX's checker: {e}")
                    continue
                # Inputs: the model's dtypes and shapes, its dim_params at the symbols' sizes.
                feeds, why = {}, None
                for v in model.graph.input:
                    tt = v.type.tensor_type
                    shape = [dd.dim_value if dd.HasField("dim_value") else sizes.get(dd.dim_param, 3) for dd in tt.shape.dim]
                    x = make_input(rng, tt.elem_type, shape)
                    if x is None:
                        why = f"input {v.name} has ONNX element type {tt.elem_type}, which this test does not make"
                        break
                    feeds[v.name] = x
                if why:
                    skipped += 1
                    print(f"SKIP {label}: {why}")
                    continue
                # Tessera's outputs: a driver in a copy of the example's folder.
                src = os.path.join(d, "src")
                shutil.copytree(os.path.dirname(path), src, ignore=shutil.ignore_patterns("*.gz", "*.csv", "data"))
                module = os.path.splitext(os.path.basename(path))[0]
                lines = [f"import {module}", "", "def main():"]
                names = []
                for k, (n, x) in enumerate(feeds.items()):
                    np.save(os.path.join(d, f"in_{k}.npy"), x)
                    var = f"a{k}"
                    elem = model.graph.input[k].type.tensor_type.elem_type
                    load = f'load("{os.path.join(d, f"in_{k}.npy")}")'
                    lines.append(f"    {var} = " + (f"cast({load}, {TSR_DTYPE[elem]})" if elem in TSR_DTYPE else load))
                    names.append(var)
                outs = [f"o{k}" for k in range(len(model.graph.output))]
                lines.append(f"    {', '.join(outs)} = {module}.{name}({', '.join(names)})")
                saved = []
                for k, o in enumerate(model.graph.output):
                    e = o.type.tensor_type.elem_type
                    saved.append(f'"o{k}": ' + (f"cast(o{k}, f32)" if e in TSR_DTYPE else f"o{k}"))
                lines.append(f'    save("{os.path.join(d, "tsr_out.npz")}", {{{", ".join(saved)}}})')
                with open(os.path.join(src, "ort_driver.tsr"), "w") as f:
                    f.write("\n".join(lines) + "\n")
                r = run([tsr, "run", "ort_driver.tsr", "--device", device], cwd=src)
                if r.returncode != 0:
                    failed += 1
                    print(f"FAIL {label}: tsr run of the driver exited {r.returncode}: {first_error(r.stderr + r.stdout)}")
                    continue
                want = np.load(os.path.join(d, "tsr_out.npz"))
                want = [want[f"o{k}"] for k in range(len(outs))]
                # The model as ONNX Runtime runs it.
                tol = 2e-2 if model_dtypes(model) & LOW else 1e-4
                what = perturb(model) if negative else ""
                model = bf16_boundary(model)
                ort_feeds = {n: x for n, x in feeds.items()}
                bad, notes, unsupported, ran = [], [], [], 0
                for prov in providers:
                    try:
                        got = run_model(model.SerializeToString(), ort_feeds, prov)
                    except Exception as e:  # noqa: BLE001 - onnxruntime's errors are of several classes
                        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                        if (ort is None and "interpreter has no" in msg) or "NOT_IMPLEMENTED" in msg or "Could not find an implementation" in msg:
                            # The provider has no kernel for an op at these dtypes (ONNX Runtime's
                            # CPU provider has no bf16 MatMul): not a wrong export.
                            unsupported.append(f"{pname(prov)}: {msg[:300]}")
                            continue
                        bad.append(f"{pname(prov)}: {type(e).__name__}: {msg[:300]}")
                        continue
                    ran += 1
                    for k, (g, w) in enumerate(zip(got, want)):
                        ok, msg = compare(g, w, tol)
                        (notes if ok else bad).append(f"{pname(prov)} output {k}: {msg}")
                if not ran and not bad:
                    skipped += 1
                    print(f"SKIP {label}: no provider runs it: " + "; ".join(unsupported))
                    continue
                notes += [f"{u.split(':')[0]} not run: {u.split(': ', 1)[1]}" for u in unsupported]
                dims = "specialized " + " ".join(spec[1::2]) if spec else "dim_params " + (" ".join(f"{s}={v}" for s, v in sizes.items()) or "none")
                info = f"{len(model.graph.node)} nodes, {dims}" + (f", control: {what}" if what else "")
                if bad:
                    failed += 1
                    print(f"FAIL {label} ({info}): " + "; ".join(bad))
                else:
                    passed += 1
                    print(f"PASS {label} ({info}): " + "; ".join(notes))
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
