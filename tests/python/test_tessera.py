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

tally = Tally()


def check(name, ok, detail=""):
    tally.report(ok, name, detail)


def raises(name, fn, kind, *parts):
    try:
        fn()
    except kind as e:
        text = str(e)
        missing = [p for p in parts if p not in text]
        check(name, not missing, f"message lacks {missing}: {text}")
        return text
    except Exception as e:  # noqa: BLE001
        check(name, False, f"raised {type(e).__name__}: {e}")
        return None
    check(name, False, "did not raise")
    return None


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



class TinyViT(torch.nn.Module):
    """The design documents' integration point: a PyTorch ViT whose layer norms and attention are
    Tessera's (the stdlib's nn.layer_norm and nn.scaled_dot_product_attention through the
    package), or PyTorch's own with `tessera_ops=None`; same parameters either way."""

    def __init__(self, tessera_ops=None, dim=16, heads=2, patches=4, classes=3):
        super().__init__()
        self.ops, self.dim, self.heads = tessera_ops, dim, heads
        self.embed = torch.nn.Linear(4, dim)
        self.pos = torch.nn.Parameter(torch.randn(patches, dim) * 0.1)
        self.ln1_w, self.ln1_b = torch.nn.Parameter(torch.ones(dim)), torch.nn.Parameter(torch.zeros(dim))
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.ln2_w, self.ln2_b = torch.nn.Parameter(torch.ones(dim)), torch.nn.Parameter(torch.zeros(dim))
        self.head = torch.nn.Linear(dim, classes)

    def layer_norm(self, t, w, b):
        if self.ops is None:
            return F.layer_norm(t, (self.dim,), w, b)
        shape = t.shape
        return self.ops["layer_norm"](t.reshape(-1, self.dim), w, b).reshape(shape)

    def attention(self, q, k, v):
        if self.ops is None:
            return torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, -1) @ v
        return self.ops["attention"](q, k, v)

    def forward(self, x):  # x [B, P, 4]
        bsz, p, _ = x.shape
        h = self.embed(x) + self.pos
        q, k, v = self.qkv(self.layer_norm(h, self.ln1_w, self.ln1_b)).split(self.dim, -1)
        split = lambda t: t.reshape(bsz, p, self.heads, -1).transpose(1, 2).reshape(bsz * self.heads, p, -1)  # noqa: E731
        o = self.attention(split(q), split(k), split(v))
        o = o.reshape(bsz, self.heads, p, -1).transpose(1, 2).reshape(bsz, p, self.dim)
        h = h + self.proj(o)
        return self.head(self.layer_norm(h, self.ln2_w, self.ln2_b).mean(1))


ops = {"layer_norm": tessera.torch.function(mc.layer_norm), "attention": tessera.torch.function(mc.attention)}
torch.manual_seed(2)
vit_t = TinyViT(ops)
vit_p = TinyViT(None)
vit_p.load_state_dict(vit_t.state_dict())
opt_t = torch.optim.SGD(vit_t.parameters(), lr=0.05)
opt_p = torch.optim.SGD(vit_p.parameters(), lr=0.05)
images, labels = torch.randn(8, 4, 4), torch.randint(0, 3, (8,))
worst, vit_losses = 0.0, []
for step in range(3):
    for net, opt in ((vit_t, opt_t), (vit_p, opt_p)):
        opt.zero_grad()
        loss = F.cross_entropy(net(images), labels)
        loss.backward()
        if net is vit_t:
            vit_losses.append(float(loss))
    for (name, a), (_, b2) in zip(vit_t.named_parameters(), vit_p.named_parameters()):
        worst = max(worst, float((a.grad - b2.grad).abs().max()))
    opt_t.step()
    opt_p.step()
check("ViT: 3 training steps, every parameter's gradient equals PyTorch's (max |diff| < 1e-4)", worst < 1e-4, f"max diff {worst}")
check("ViT: the loss falls", vit_losses[-1] < vit_losses[0], str(vit_losses))

sys.exit(tally.summary(minimum=30, what="checks"))
