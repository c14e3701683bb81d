#!/usr/bin/env python3
"""ctest python_package: the `tessera` package from a build tree, on a CPU bundle, against torch.

    test_tessera.py PACKAGE_PARENT TSRC WORKDIR

PACKAGE_PARENT holds the built package (tessera/ with its modules); TSRC makes the bundle of
tests/python/model.tsr (--target cpu, traced with main's shapes) in WORKDIR. Checks:
- load() (no compiler in the process) calls layer_norm and attention on torch tensors and NumPy
  arrays, with values equal to torch.nn.functional's, the arguments read without copies (the
  stats counters) and the results' memory owned by the returned tensors;
- tessera.torch.function: forward and backward inside autograd, gradients equal to torch's own
  (weight, bias and input of layer_norm; q, k, v of attention); a few steps of SGD on a module
  that uses it lower the loss;
- bad input raises with Tessera's diagnostic text: the wrong dtype (TypeError naming the
  parameter, the annotation and the dtype given), a wrong fixed size, symbols bound to two sizes,
  a non-contiguous tensor (copied with a warning), a missing function;
- negative controls: a program the bundle lacks (other shapes) is an error naming it, since the
  runtime has no compiler; compile() of the same source runs those shapes (the JIT); a wrong
  reference value is detected by the same comparison that passes.
Ends with testlib's `N passed, N failed` line (fewer than 30 checks run is a failure).
"""
import os
import subprocess
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from torch_python import reexec_with_torch  # noqa: E402
from testlib import Tally  # noqa: E402

if __name__ == "__main__":
    reexec_with_torch("python_package")
sys.path.insert(0, sys.argv[1])
TSRC, WORK = sys.argv[2], sys.argv[3]

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tessera  # noqa: E402
import tessera.torch  # noqa: E402
from tiny_vit import train_side_by_side  # noqa: E402

tally = Tally()


def check(name, ok, detail=""):
    tally.report(ok, name, detail)


def raises(name, fn, kind, *parts):
    return tally.raises(name, fn, kind, *parts)


def close(a, b, tol=1e-5):
    return a.shape == b.shape and float((a - b).abs().max()) <= tol


os.makedirs(WORK, exist_ok=True)
bundle = os.path.join(WORK, "model.bundle")
r = subprocess.run([TSRC, os.path.join(HERE, "model.tsr"), "-o", bundle, "--target", "cpu", "--trace", ""],
                   capture_output=True, text=True)
if r.returncode != 0:
    sys.exit(f"tsrc failed:\n{r.stderr}")

m = tessera.load(bundle)
check("load: entries", {"layer_norm", "attention", "scale_shift", "main"} <= set(m.entries), str(m.entries))
check("load: no compiler module in the process", "tessera._compiler" not in sys.modules)

torch.manual_seed(0)
x = torch.randn(6, 32)
w = torch.randn(32)
b = torch.randn(32)
before = tessera.stats()
y = m.layer_norm(x, w, b)
after = tessera.stats()
check("layer_norm: a torch.Tensor back", isinstance(y, torch.Tensor))
check("layer_norm: values equal F.layer_norm's", close(y, F.layer_norm(x, (32,), w, b)))
check("layer_norm: arguments read in place (no copies)",
      after["wrapped"] - before["wrapped"] == 3 and after["copied"] == before["copied"], f"{before} -> {after}")
y2 = m.layer_norm(x, w, b)
check("layer_norm: each call's result has its own buffer", y.data_ptr() != y2.data_ptr())

xn, wn, bn = x.numpy(), w.numpy(), b.numpy()
yn = m.layer_norm(xn, wn, bn)
check("layer_norm: NumPy in, NumPy out", isinstance(yn, np.ndarray) and np.allclose(yn, y.numpy(), atol=1e-6))

q, k, v = (torch.randn(2, 5, 8) for _ in range(3))
o = m.attention(q, k, v)
ref = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1) @ v
check("attention: values equal torch's", close(o, ref))
check("scalar argument", close(m.scale_shift(torch.ones(3, 4), 2.0), torch.full((3, 4), 3.0)))

# Gradients through tessera.torch.function against torch's own.
ln = tessera.torch.function(m.layer_norm)
xt, wt, bt = (t.clone().requires_grad_() for t in (x, w, b))
yt = ln(xt, wt, bt)
gy = torch.randn(6, 32)
(yt * gy).sum().backward()
xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
(F.layer_norm(xr, (32,), wr, br) * gy).sum().backward()
check("layer_norm: forward inside autograd", close(yt.detach(), F.layer_norm(x, (32,), w, b)))
check("layer_norm: d/dx equals torch's", close(xt.grad, xr.grad, 1e-4))
check("layer_norm: d/dw equals torch's", close(wt.grad, wr.grad, 1e-4))
check("layer_norm: d/db equals torch's", close(bt.grad, br.grad, 1e-4))
check("negative control: a perturbed reference gradient is told apart", not close(xt.grad, xr.grad + 1e-2, 1e-4))

att = tessera.torch.function(m.attention)
qt, kt, vt = (t.clone().requires_grad_() for t in (q, k, v))
go = torch.randn(2, 5, 8)
(att(qt, kt, vt) * go).sum().backward()
qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
((torch.softmax(qr @ kr.transpose(-1, -2) / 8 ** 0.5, -1) @ vr) * go).sum().backward()
for name, a, bb in [("q", qt, qr), ("k", kt, kr), ("v", vt, vr)]:
    check(f"attention: d/d{name} equals torch's", close(a.grad, bb.grad, 1e-4))


class Block(torch.nn.Module):
    """A layer norm from Tessera inside a torch module, trained by torch's optimizer."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(32))
        self.b = torch.nn.Parameter(torch.zeros(32))
        self.proj = torch.nn.Linear(32, 1)

    def forward(self, t):
        return self.proj(ln(t, self.w, self.b)).squeeze(-1)


torch.manual_seed(1)
net = Block()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
data, target = torch.randn(6, 32), torch.randn(6)
losses = []
for _ in range(5):
    opt.zero_grad()
    loss = ((net(data) - target) ** 2).mean()
    loss.backward()
    opt.step()
    losses.append(float(loss))
check("training: the loss falls over 5 SGD steps", losses[-1] < losses[0], str(losses))
check("training: the layer norm's weight got gradients", float(net.w.grad.abs().sum()) > 0)

# Bad input: Tessera's diagnostic text.
raises("wrong dtype: TypeError naming the parameter, the annotation and the dtype",
       lambda: m.layer_norm(x.double(), w, b), TypeError, "`layer_norm`", "parameter `x`", 'Tensor["N", "D", f32]', "f64",
       "model.tsr:")
raises("symbols bound to two sizes: ValueError naming both parameters",
       lambda: m.layer_norm(x, torch.randn(16), b), ValueError, "parameter `w`", "`D` is 16", "32 in parameter `x`")
raises("wrong rank", lambda: m.layer_norm(x[0], w, b), ValueError, "parameter `x`", "2 dimensions expected, 1 given")
raises("wrong fixed size", lambda: m.scale_shift(torch.ones(3, 5), 2.0), ValueError, "parameter `x`", "dimension 1 is 5, not 4")
raises("not a tensor", lambda: m.layer_norm("x", w, b), TypeError, "parameter `x`", "given a str")
raises("a missing function", lambda: m.softmax, AttributeError, "no function `softmax`", "layer_norm")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    yt2 = m.layer_norm(x.t().contiguous().t(), w, b)
check("non-contiguous: copied with a warning naming the parameter",
      any("parameter `x`" in str(c.message) and "not contiguous" in str(c.message) for c in caught) and close(yt2, y))

# Negative control: shapes the trace did not run need programs the bundle lacks; the runtime has
# no compiler, so that is an error naming the program, where compile() runs them.
xs = torch.randn(3, 16)
msg = raises("negative control: a program the bundle lacks is an error (no compiler)",
             lambda: m.layer_norm(xs, torch.ones(16), torch.zeros(16)), tessera.TesseraError, "not in the bundle")
mc = tessera.compile(os.path.join(HERE, "model.tsr"))
check("compile(): the same shapes run with the JIT",
      close(mc.layer_norm(xs, torch.ones(16), torch.zeros(16)), F.layer_norm(xs, (16,))))



ops = {"layer_norm": tessera.torch.function(mc.layer_norm), "attention": tessera.torch.function(mc.attention)}
worst, vit_losses = train_side_by_side(ops)
check("ViT: 3 training steps, every parameter's gradient equals PyTorch's (max |diff| < 1e-4)", worst < 1e-4, f"max diff {worst}")
check("ViT: the loss falls", vit_losses[-1] < vit_losses[0], str(vit_losses))

# Devices, without a GPU (test_tessera_cuda.py runs the GPU itself): a bundle without code for a
# device names it, before any driver is asked; a tensor on another device than the program's is a
# ValueError naming both; without a driver the package imports and a GPU is refused with the
# reason. The CUDA tensor here is a DLPack capsule made by hand (ctypes) over host memory: never
# read, since the device check refuses it.
import ctypes  # noqa: E402


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLManaged(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_keep = []


def fake_cuda_capsule(t):
    """A DLPack capsule that says `t` (a CPU tensor, 64-byte aligned) is on cuda:0."""
    shape = (ctypes.c_int64 * t.dim())(*t.shape)
    m = _DLManaged()
    m.dl_tensor = _DLTensor(t.data_ptr(), _DLDevice(2, 0), t.dim(), _DLDataType(2, 32, 1), shape, None, 0)
    _keep.extend([t, shape, m])
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(m), b"dltensor", None)


class FakeCudaArray:
    """Says it is on cuda:0 (__dlpack_device__), as a CUDA array would; its data is never asked for."""

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("read before the device was checked")


raises("device: a bundle without code for the device names it (cuda:0), before any driver is asked",
       lambda: tessera.load(bundle, device="cuda"), tessera.TesseraError, "cuda:0", "code for the cpu only")
raises("device: inferred from the tensors (a CUDA array, device=None): the missing device is named",
       lambda: m.layer_norm(FakeCudaArray(), w, b), tessera.TesseraError, "cuda:0", "code for the cpu only")
raises("device: a tensor on another device than the program's: ValueError naming the parameter and both devices",
       lambda: tessera.load(bundle, device="cpu").layer_norm(fake_cuda_capsule(x.clone()), w, b), ValueError,
       "parameter `x`", "the tensor is on cuda:0", "this program runs on cpu")
raises("device: an unknown device name", lambda: tessera.load(bundle, device="tpu"), ValueError, "device `tpu`")

cuda_bundle = os.path.join(WORK, "model.cuda.bundle")
r = subprocess.run([TSRC, os.path.join(HERE, "model.tsr"), "-o", cuda_bundle, "--target", "cuda", "--arch", "sm_90",
                    "--trace", ""], capture_output=True, text=True)
check("device: tsrc makes a cuda bundle of the test's program (--target cuda --trace)", r.returncode == 0, r.stderr[-2000:])
raises("device: a GPU-only bundle on a CPU names the CPU as the missing device",
       lambda: tessera.load(cuda_bundle, device="cpu"), tessera.TesseraError, "the device is the cpu", "cuda (sm_90) only")
# Without a driver (TSR_LIBCUDA names none): the package imports, CPU programs run, and a GPU is
# refused with the driver's reason, naming the device.
NO_DRIVER = """
import sys, tessera, tessera.torch, torch
m = tessera.load(sys.argv[1])
print("cpu call ok", float(m.scale_shift(torch.ones(3, 4), 2.0).sum()))
for what, fn in [("load", lambda: tessera.load(sys.argv[2], device="cuda")),
                 ("load-inferred", lambda: tessera.load(sys.argv[2])),
                 ("compile", lambda: tessera.compile(sys.argv[3], device="cuda"))]:
    try:
        fn()
        print(what, "did not raise")
    except tessera.TesseraError as e:
        print(what, "refused:", str(e).replace("\\n", " | "))
"""
env = dict(os.environ, TSR_LIBCUDA="/nonexistent/libcuda.so.1", PYTHONPATH=sys.argv[1])
r = subprocess.run([sys.executable, "-c", NO_DRIVER, bundle, cuda_bundle, os.path.join(HERE, "model.tsr")],
                   capture_output=True, text=True, env=env)
lines = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.strip()}
check("no driver: the package imports and a CPU program runs", lines.get("cpu", "").startswith("cpu call ok 36"),
      r.stdout + r.stderr[-2000:])
check("no driver: load(cuda bundle, device='cuda') is refused naming cuda:0 and the driver",
      "device cuda:0" in lines.get("load", "") and "/nonexistent/libcuda.so.1" in lines.get("load", ""), r.stdout)
check("no driver: load(cuda bundle) on a CPU names the missing device (cpu)",
      "refused" in lines.get("load-inferred", "") and "the device is the cpu" in lines.get("load-inferred", ""), r.stdout)
check("no driver: compile(device='cuda') is refused naming cuda:0 and the driver",
      "device cuda:0" in lines.get("compile", "") and "/nonexistent/libcuda.so.1" in lines.get("compile", ""), r.stdout)
# The GPU path against tests/cuda's fake libcuda (TSR_LIBCUDA; it runs no kernel, so values are
# not checked): a cuda bundle loads on its cuda:0, a CUDA DLPack tensor (the fake's device
# memory, as a ctypes capsule) is borrowed without a copy, the launch goes on the stream
# set_stream names (the fake records each launch's stream) and on the device's own stream without
# one (the control), the result is a kDLCUDA capsule on device 0, a CPU tensor is refused naming
# cuda:0, and compile(device="cuda") compiles PTX that the fake loads. The bundle has PTX only
# (TSR_PTXAS=none): the fake reads entries from PTX, not from cubins.
FAKE = """
import ctypes, sys
sys.path.insert(0, sys.argv[1])
import tessera, torch
fake, bundle, source = sys.argv[2:5]
lib = ctypes.CDLL(fake)


class D(ctypes.Structure):
    _fields_ = [("t", ctypes.c_int), ("i", ctypes.c_int)]


class T(ctypes.Structure):
    _fields_ = [("c", ctypes.c_uint8), ("b", ctypes.c_uint8), ("l", ctypes.c_uint16)]


class DL(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", D), ("ndim", ctypes.c_int), ("dtype", T),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.c_void_p), ("off", ctypes.c_uint64)]


class M(ctypes.Structure):
    _fields_ = [("dl", DL), ("ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


keep = []
new = ctypes.pythonapi.PyCapsule_New
new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
get = ctypes.pythonapi.PyCapsule_GetPointer
get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
last = lib.fakecuda_last_launch
last.restype = ctypes.c_void_p


def cuda_capsule():
    p = ctypes.c_ulonglong()
    assert lib.cuMemAlloc_v2(ctypes.byref(p), 48) == 0
    shape = (ctypes.c_int64 * 2)(3, 4)
    m = M()
    m.dl = DL(p.value, D(2, 0), 2, T(2, 32, 1), shape, None, 0)
    keep.extend([shape, m])
    return new(ctypes.addressof(m), b"dltensor", None)


def launch_stream():  # FakeCudaLaunch: char name[64]; unsigned grid[3], block[3], shared; void *stream
    return ctypes.c_void_p.from_address(last() + 96).value


for how in ("load", "compile"):
    prog = tessera.load(bundle, device="cuda") if how == "load" else tessera.compile(source, device="cuda")
    print(how, "device", prog.device)
    if how == "load":
        ctx = ctypes.c_void_p()
        assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0 and lib.cuCtxSetCurrent(ctx) == 0
        stream = ctypes.c_void_p()
        assert lib.cuStreamCreate(ctypes.byref(stream), 0) == 0
    native = prog._natives["cuda:0"]
    before = tessera.stats() if how == "load" else None
    native.set_stream(stream.value)
    out = native.call("scale_shift", cuda_capsule(), 2.0)
    on_given = launch_stream() == stream.value
    r = M.from_address(get(out, b"dltensor"))
    native.set_stream(None)
    native.call("scale_shift", cuda_capsule(), 2.0)
    on_own = launch_stream() not in (stream.value, None)
    print(how, "stream", on_given, "own", on_own, "result", r.dl.device.t, r.dl.device.i, bool(r.dl.data))
    if before is not None:
        after = tessera.stats()
        print(how, "counts", after["wrapped"] - before["wrapped"], after["copied"] - before["copied"])
    try:
        prog.scale_shift(torch.ones(3, 4), 2.0)
        print(how, "cpu-tensor accepted")
    except ValueError as e:
        print(how, "cpu-tensor refused:", e)
"""
fake_lib = os.path.join(sys.argv[1], "..", "tests", "cuda", "fake_libcuda.so")
ptx_bundle = os.path.join(WORK, "model.ptx.bundle")
r = subprocess.run([TSRC, os.path.join(HERE, "model.tsr"), "-o", ptx_bundle, "--target", "cuda", "--arch", "sm_90", "--trace", ""],
                   capture_output=True, text=True, env=dict(os.environ, TSR_PTXAS="none"))
check("fake driver: the fake libcuda is built, a PTX-only cuda bundle made", os.path.exists(fake_lib) and r.returncode == 0,
      f"{fake_lib}: {os.path.exists(fake_lib)}; {r.stderr[-1000:]}")
r = subprocess.run([sys.executable, "-c", FAKE, sys.argv[1], os.path.abspath(fake_lib), ptx_bundle, os.path.join(HERE, "model.tsr")],
                   capture_output=True, text=True, env=dict(os.environ, TSR_LIBCUDA=os.path.abspath(fake_lib)))
out = r.stdout + r.stderr[-3000:]
for how in ("load", "compile"):
    lines = [ln[len(how) + 1:] for ln in r.stdout.splitlines() if ln.startswith(how + " ")]
    check(f"fake driver, {how}(device='cuda'): runs on cuda:0", "device cuda:0" in lines, out)
    check(f"fake driver, {how}: the launch goes on the stream set_stream names, else on the device's own (control)",
          any(ln.startswith("stream True own True") for ln in lines), out)
    check(f"fake driver, {how}: the result is a DLPack tensor on cuda:0 (kDLCUDA) with device memory",
          any(ln.endswith("result 2 0 True") for ln in lines), out)
    check(f"fake driver, {how}: a CPU tensor for the GPU program is refused naming the parameter and cuda:0",
          any("cpu-tensor refused" in ln and "parameter `x`" in ln and "this program runs on cuda:0" in ln for ln in lines), out)
check("fake driver, load: the CUDA argument is borrowed (wrapped, no copy)", "load counts 2 0" in r.stdout, out)

sys.exit(tally.summary(minimum=40, what="checks"))
