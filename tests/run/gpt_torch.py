#!/usr/bin/env python3
"""examples/gpt's model against ../shared/bench/gpt_torch.py's PyTorch GPT (ctest gpt_torch).

  gpt_torch.py TSR REPO [--negative]

At a small size (2 layers, 2 heads, width 32, context 16, vocabulary 50, batch 3) PyTorch's model
gets random parameters (its initialisation, then noise on every tensor, so that no layer norm is
the identity and no bias zero) and random tokens; tests/gpt/gpt_forward.tsr runs examples/gpt's
model.tsr on the same parameters and tokens, and the logits, the cross-entropy and the gradient of
every parameter (the tied embedding's from both of its uses) are compared in f32: relative error
(the difference's norm over PyTorch's) at most 1e-5 for each (measured: 2e-7 for the logits,
2e-7 to 5e-7 for the gradients). The Debian torch (1.13) has no F.scaled_dot_product_attention; where it is missing the
test supplies PyTorch's documented definition (softmax(q k^T / sqrt(d) + causal mask) v).
--negative is the control: PyTorch's attention without the causal mask, which the comparison must
catch (the output expect.py looks for is "FAIL: logits differ").
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

reexec_with_torch("gpt_torch")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

LAYERS, HEADS, WIDTH, CONTEXT, VOCAB, BATCH = 2, 2, 32, 16, 50, 3


def reference_sdpa(q, k, v, attn_mask=None, is_causal=False):
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if is_causal:
        t = q.shape[-2]
        s = s.masked_fill(~torch.ones(t, k.shape[-2], dtype=torch.bool).tril(), float("-inf"))
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def tessera_name(torch_name):
    """model.flatten's name of a parameter of gpt_torch.GPT."""
    parts = torch_name.split(".")
    if torch_name == "tok.weight":
        return "decay.tok"
    if torch_name == "pos.weight":
        return "decay.pos"
    if parts[0] == "ln":
        return "no_decay.ln_" + ("w" if parts[1] == "weight" else "b")
    _, i, layer, kind = parts
    if kind == "weight" and layer in ("qkv", "proj", "fc1", "fc2"):
        return f"decay.blocks.{i}.{layer}_w"
    return f"no_decay.blocks.{i}.{layer}_{'w' if kind == 'weight' else 'b'}"


def rel(a, b):
    a = torch.as_tensor(a, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    return float((a - b).norm() / max(float(b.norm()), 1e-300))


def main():
    tsr, repo = sys.argv[1:3]
    negative = "--negative" in sys.argv
    bench = os.path.join(repo, "..", "shared", "bench")
    if not os.path.exists(os.path.join(bench, "gpt_torch.py")):
        skip("gpt_torch", f"the PyTorch model ../shared/bench/gpt_torch.py is missing ({bench})")
    sys.path.insert(0, bench)
    import gpt_torch as G
    G.L, G.H, G.D, G.T = LAYERS, HEADS, WIDTH, CONTEXT
    sdpa = getattr(F, "scaled_dot_product_attention", reference_sdpa)
    if negative:
        F.scaled_dot_product_attention = lambda q, k, v, attn_mask=None, is_causal=False: sdpa(q, k, v, attn_mask)
    else:
        F.scaled_dot_product_attention = sdpa

    torch.manual_seed(0)
    model = G.GPT(VOCAB)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x = torch.randint(0, VOCAB, (BATCH, CONTEXT))
    y = torch.randint(0, VOCAB, (BATCH, CONTEXT))
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
    loss.backward()
    named = dict(model.named_parameters())

    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        inputs = os.path.join(tmp, "gpt_in.npz")
        out = os.path.join(tmp, "gpt_out.npz")
        arrays = {tessera_name(n): p.detach().numpy() for n, p in named.items()}
        arrays["x"] = x.numpy().astype(np.int32)
        arrays["y"] = y.numpy().astype(np.int32)
        np.savez(inputs, **arrays)
        cmd = [tsr, "run", os.path.join(repo, "tests", "gpt", "gpt_forward.tsr"), "--device", "cpu",
               "--inputs", inputs, "--out", out, "--layers", str(LAYERS), "--heads", str(HEADS)]
        env = dict(os.environ, TESSERA_PATH=os.path.join(repo, "examples", "gpt"))
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        if r.returncode != 0:
            print(f"FAIL: {' '.join(cmd)}: exit {r.returncode}\n{r.stdout}{r.stderr}")
            return 1
        print(r.stdout, end="")
        ours = dict(np.load(out))
    pairs = [("logits", ours["logits"], logits.detach(), 1e-5), ("loss", ours["loss"], loss.detach(), 1e-5)]
    for n, p in sorted(named.items()):
        pairs.append((f"grad {n}", ours["grad." + tessera_name(n)], p.grad, 1e-5))
    worst = 0.0
    for name, a, b, tol in pairs:
        e = rel(a, b)
        worst = max(worst, e / tol)
        if not e <= tol:
            failures.append(f"{name} differ: relative error {e:.3e} > {tol:.0e}")
        print(f"{name:28s} relative error {e:.2e} (tolerance {tol:.0e})")
    print(f"loss: Tessera {float(ours['loss']):.6f}, PyTorch {float(loss):.6f}")
    for f in failures:
        print("FAIL: " + f)
    print(f"gpt_torch: {'FAIL' if failures else 'ok'} ({len(pairs)} tensors compared, {len(failures)} differ; "
          f"worst at {worst:.2f} of its tolerance)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
