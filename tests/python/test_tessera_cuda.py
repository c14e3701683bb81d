#!/usr/bin/env python3
"""ctest python_cuda: the `tessera` package on a GPU, with CUDA torch.Tensors (docs/python.md).

    test_tessera_cuda.py PACKAGE_PARENT WORKDIR (--tsrc TSRC | --bundles DIR)

PACKAGE_PARENT holds the built package (tessera/ with its modules). The bundles of
tests/python/model.tsr, model.cpu.bundle (--target cpu) and model.cuda.bundle (--target cuda,
traced with main's shapes), are made in WORKDIR by TSRC, or taken from DIR (a machine with a GPU
but no compiler: tools/gpu/pack_python.sh makes them). Without a GPU it prints a SKIP line and
exits 77 (ctest: skipped), whatever TSR_REQUIRE_PREREQS says. Checks:
- load(device="cuda") and load() inferring the device from CUDA tensors: layer_norm, attention and
  scale_shift equal torch's on the GPU; results are CUDA tensors on the arguments' device; the
  arguments are read in place (the stats counters) and each result has its own device memory;
- the work runs on PyTorch's current stream: on a side stream, a Tessera call queued behind a
  50 ms sleep and a copy into its input sees the copied values (its negative control: the same
  call on Tessera's own stream reads the input before the copy);
- bad input: a CPU tensor for a GPU program, a tensor on the GPU and one on the CPU in one call,
  a wrong dtype (exceptions naming the parameter and what was expected and given), a non-contiguous
  tensor (copied with a warning), a view off the 256-byte boundary (copied), a CPU-only bundle
  given CUDA tensors (TesseraError naming cuda:0);
- tessera.torch.function on the GPU: gradients of layer_norm and attention equal torch's;
- compile(device="cuda"): shapes the bundle lacks run (PTX compiled here); the ViT of issue 14
  trained 3 steps on the GPU with every parameter's gradient within 1e-4 of PyTorch's.
Ends with testlib's `N passed, N failed` line.
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
    reexec_with_torch("python_cuda")
if len(sys.argv) != 5 or sys.argv[3] not in ("--tsrc", "--bundles"):
    sys.exit(__doc__)
sys.path.insert(0, sys.argv[1])
WORK = sys.argv[2]

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

if not torch.cuda.is_available():
    # A GPU test skips on a machine without a GPU, also in CI (TSR_REQUIRE_PREREQS=1).
    print(f"SKIP python_cuda: no GPU (torch {torch.__version__}: torch.cuda.is_available() is False)")
    sys.exit(77)

import tessera  # noqa: E402
import tessera.torch  # noqa: E402
from tiny_vit import train_side_by_side  # noqa: E402

tally = Tally()
dev = torch.device("cuda:0")
torch.backends.cuda.matmul.allow_tf32 = False  # the reference in f32, as Tessera computes
torch.backends.cudnn.allow_tf32 = False


def check(name, ok, detail=""):
    tally.report(ok, name, detail)


def raises(name, fn, kind, *parts):
    return tally.raises(name, fn, kind, *parts)


def close(a, b, tol=1e-5):
    return a.shape == b.shape and a.device == b.device and float((a - b).abs().max()) <= tol


os.makedirs(WORK, exist_ok=True)
if sys.argv[3] == "--tsrc":
    for target in ("cpu", "cuda"):
        r = subprocess.run([sys.argv[4], os.path.join(HERE, "model.tsr"), "-o", os.path.join(WORK, f"model.{target}.bundle"),
                            "--target", target, "--trace", ""], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"tsrc --target {target} failed:\n{r.stderr}")
    BUNDLES = WORK
else:
    BUNDLES = sys.argv[4]
cpu_bundle, cuda_bundle = (os.path.join(BUNDLES, f"model.{t}.bundle") for t in ("cpu", "cuda"))
print(f"GPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, python {sys.version.split()[0]}")

m = tessera.load(cuda_bundle, device="cuda")
check("load(device='cuda'): runs on cuda:0", m.device == "cuda:0", repr(m))
torch.manual_seed(0)
x, w, b = torch.randn(6, 32, device=dev), torch.randn(32, device=dev), torch.randn(32, device=dev)
torch.cuda.synchronize()
before = tessera.stats()
y = m.layer_norm(x, w, b)
after = tessera.stats()
check("layer_norm: a CUDA tensor back, on the arguments' device", isinstance(y, torch.Tensor) and y.device == dev, str(y.device))
check("layer_norm: values equal F.layer_norm's", close(y, F.layer_norm(x, (32,), w, b)))
check("layer_norm: arguments read in place on the GPU (no copies)",
      after["wrapped"] - before["wrapped"] == 3 and after["copied"] == before["copied"], f"{before} -> {after}")
y2 = m.layer_norm(x, w, b)
check("layer_norm: each call's result has its own device memory", y.data_ptr() != y2.data_ptr() and close(y, y2))
q, k, v = (torch.randn(2, 5, 8, device=dev) for _ in range(3))
ref = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1) @ v
check("attention: values equal torch's", close(m.attention(q, k, v), ref))
check("scalar argument", close(m.scale_shift(torch.ones(3, 4, device=dev), 2.0), torch.full((3, 4), 3.0, device=dev)))
held = m.layer_norm(x, w, b)
ptr = held.data_ptr()
del y, y2
torch.cuda.synchronize()
check("a result outlives the call and later calls (its memory is the tensor's)",
      held.data_ptr() == ptr and close(held, F.layer_norm(x, (32,), w, b)))

mi = tessera.load(cuda_bundle)  # the device from the tensors
check("load(): a GPU-only bundle opens without naming a device", mi.device is None, repr(mi))
check("load(): the device inferred from CUDA tensors", close(mi.layer_norm(x, w, b), F.layer_norm(x, (32,), w, b)))

# PyTorch's current stream: a side stream sleeps 50 ms, then copies 7s into the input; the call,
# queued after both on the same stream, must see the 7s. Tessera's own stream (the negative
# control, through the runtime directly) does not wait for the side stream and reads the zeros.
src = torch.full((3, 4), 7.0, device=dev)
inp = torch.zeros(3, 4, device=dev)
torch.cuda.synchronize()
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    torch.cuda._sleep(100_000_000)
    inp.copy_(src)
    out = m.scale_shift(inp, 2.0)
side.synchronize()
check("stream: the call runs on PyTorch's current stream (after the side stream's copy)",
      close(out, torch.full((3, 4), 15.0, device=dev)), str(out))
native = m._natives["cuda:0"]
# A call on Tessera's own stream first, so that the result's block is in its cache: a driver
# allocation (cuMemAlloc) inside the timed call may wait for the device and hide the race.
native.set_stream(None)
warm = native.call("scale_shift", inp.__dlpack__(), 2.0)
del warm  # its block goes back to the own stream's cache
inp.zero_()
torch.cuda.synchronize()
with torch.cuda.stream(side):
    torch.cuda._sleep(100_000_000)
    inp.copy_(src)
    native.set_stream(None)  # Tessera's own stream
    # The capsule made for the side stream, as the package makes it (torch adds no wait).
    cap = native.call("scale_shift", inp.__dlpack__(stream=side.cuda_stream), 2.0)
own = torch.utils.dlpack.from_dlpack(cap)
torch.cuda.synchronize()
check("negative control: on Tessera's own stream the call does not wait for PyTorch's (reads the zeros)",
      close(own, torch.full((3, 4), 1.0, device=dev)), str(own))

# Bad input.
raises("a CPU tensor for a GPU program: ValueError naming the parameter and both devices",
       lambda: m.layer_norm(x.cpu(), w, b), ValueError, "parameter `x`", "the tensor is on cpu", "this program runs on cuda:0")
raises("tensors on two devices in one call: ValueError naming the parameter on the other device",
       lambda: m.layer_norm(x, w.cpu(), b), ValueError, "parameter `w`", "the tensor is on cpu", "cuda:0")
raises("wrong dtype on the GPU: TypeError naming the parameter, the annotation and the dtype",
       lambda: m.layer_norm(x.double(), w, b), TypeError, "parameter `x`", 'Tensor["N", "D", f32]', "f64")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ync = m.layer_norm(x.t().contiguous().t(), w, b)
check("non-contiguous CUDA tensor: copied with a warning naming the parameter",
      any("parameter `x`" in str(c.message) and "not contiguous" in str(c.message) for c in caught)
      and close(ync, F.layer_norm(x, (32,), w, b)))
big = torch.randn(7, 32, device=dev)
view = big[1:]  # starts 128 bytes into its storage
before = tessera.stats()
yv = m.layer_norm(view, w, b)
after = tessera.stats()
check("a view off the 256-byte boundary: copied (counted), right values",
      after["copied"] - before["copied"] == 1 and close(yv, F.layer_norm(view, (32,), w, b)), f"{before} -> {after}")
mcpu = tessera.load(cpu_bundle)
raises("a CPU-only bundle given CUDA tensors: TesseraError naming the missing device",
       lambda: mcpu.layer_norm(x, w, b), tessera.TesseraError, "cuda:0", "cpu only")
raises("a program the GPU bundle lacks (other shapes): TesseraError naming it (no compiler)",
       lambda: m.layer_norm(torch.randn(3, 16, device=dev), torch.ones(16, device=dev), torch.zeros(16, device=dev)),
       tessera.TesseraError, "not in the bundle")

# Gradients on the GPU through tessera.torch.function.
ln = tessera.torch.function(m.layer_norm)
xt, wt, bt = (t.clone().requires_grad_() for t in (x, w, b))
gy = torch.randn(6, 32, device=dev)
(ln(xt, wt, bt) * gy).sum().backward()
xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
(F.layer_norm(xr, (32,), wr, br) * gy).sum().backward()
for name, a, bb in [("x", xt, xr), ("w", wt, wr), ("b", bt, br)]:
    check(f"layer_norm on the GPU: d/d{name} equals torch's", close(a.grad, bb.grad, 1e-4))
check("negative control: a perturbed reference gradient is told apart", not close(xt.grad, xr.grad + 1e-2, 1e-4))
att = tessera.torch.function(m.attention)
qt, kt, vt = (t.clone().requires_grad_() for t in (q, k, v))
go = torch.randn(2, 5, 8, device=dev)
(att(qt, kt, vt) * go).sum().backward()
qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
((torch.softmax(qr @ kr.transpose(-1, -2) / 8 ** 0.5, -1) @ vr) * go).sum().backward()
for name, a, bb in [("q", qt, qr), ("k", kt, kr), ("v", vt, vr)]:
    check(f"attention on the GPU: d/d{name} equals torch's", close(a.grad, bb.grad, 1e-4))

# compile(device="cuda"): PTX compiled in this process for what a bundle would lack.
mc = tessera.compile(os.path.join(HERE, "model.tsr"), device="cuda")
xs = torch.randn(3, 16, device=dev)
check("compile(device='cuda'): other shapes run on the GPU",
      close(mc.layer_norm(xs, torch.ones(16, device=dev), torch.zeros(16, device=dev)), F.layer_norm(xs, (16,))))
ops = {"layer_norm": tessera.torch.function(mc.layer_norm), "attention": tessera.torch.function(mc.attention)}
worst, losses = train_side_by_side(ops, device=dev)
check("ViT on the GPU: 3 training steps, every parameter's gradient equals PyTorch's (max |diff| < 1e-4)",
      worst < 1e-4, f"max diff {worst}")
check("ViT on the GPU: the loss falls", losses[-1] < losses[0], str(losses))
print(f"ViT on the GPU: losses {losses}, largest gradient difference {worst:.3g}")

sys.exit(tally.summary(minimum=25, what="checks"))
