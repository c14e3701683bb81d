#!/usr/bin/env python3
"""One DINO step of examples/dino against a PyTorch implementation of the paper's recipe (ctest
dino_torch).

  dino_torch.py TSR REPO [--negative]

At a small size (ViT of width 16, 2 blocks, 2 heads, patch 4; head 32 -> 32 -> 8 -> 24
prototypes; 3 images with 2 global 8-pixel and 2 local 4-pixel crops) PyTorch gets random
student and teacher parameters (noise on every tensor, so that no layer norm is the identity and
no bias zero), random crops and a random center; tests/dino/dino_step.tsr runs examples/dino's
teacher_targets and dino_loss (with Gram anchoring on both blocks, weight 0.5) on the same
values, and the teacher's targets and batch mean, the DINO loss, the Gram loss and the gradient
of every student parameter are compared in f32: relative error (the difference's norm over
PyTorch's) at most 1e-4.

The PyTorch side is written from the paper and the official code, not from the .tsr: the
teacher's softmax((t - C) / tau_t) over the prototypes, detached; DINOLoss of main_dino.py
(the loop over the pairs of a global crop i for the teacher and a crop v != i for the student,
each pair's cross-entropy averaged over the batch, the sum divided by the number of pairs); the
head of vision_transformer.py's DINOHead (3-layer GELU MLP, F.normalize, weight_norm'd last layer
with g = 1); a pre-norm ViT with the position embeddings resampled by F.interpolate (bilinear,
align_corners=False) for the local crops; Gram anchoring as DINOv3's mean squared difference of
the patch tokens' cosine-similarity matrices.

--negative is the control: PyTorch's teacher without the centering, which the comparison must
catch (the output expect.py looks for is "FAIL: t_probs differ").
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from torch_python import reexec_with_torch  # noqa: E402

reexec_with_torch("dino_torch")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DIM, DEPTH, HEADS, PATCH, MLP = 16, 2, 2, 4, 2
HIDDEN, BOTTLENECK, OUT_DIM = 32, 8, 24
B, GLOBAL, LOCAL, N_LOCAL = 3, 8, 4, 2
STUDENT_TEMP, TAU_T, GRAM_WEIGHT = 0.1, 0.04, 0.5


def init(gen):
    """Random parameters with flatten's names (dino_step.tsr), shapes as examples/dino/model.tsr."""
    grid = GLOBAL // PATCH
    shapes = {"backbone.patch_w": (DIM, PATCH * PATCH), "backbone.patch_b": (DIM,),
              "backbone.cls": (1, 1, DIM), "backbone.pos": (grid, grid, DIM),
              "backbone.ln_w": (DIM,), "backbone.ln_b": (DIM,)}
    for i in range(DEPTH):
        p = f"backbone.blocks.{i}."
        shapes.update({p + "ln1_w": (DIM,), p + "ln1_b": (DIM,), p + "qkv_w": (3 * DIM, DIM),
                       p + "qkv_b": (3 * DIM,), p + "proj_w": (DIM, DIM), p + "proj_b": (DIM,),
                       p + "ln2_w": (DIM,), p + "ln2_b": (DIM,), p + "fc1_w": (MLP * DIM, DIM),
                       p + "fc1_b": (MLP * DIM,), p + "fc2_w": (DIM, MLP * DIM), p + "fc2_b": (DIM,)})
    shapes.update({"head.w1": (HIDDEN, DIM), "head.b1": (HIDDEN,), "head.w2": (HIDDEN, HIDDEN),
                   "head.b2": (HIDDEN,), "head.w3": (BOTTLENECK, HIDDEN), "head.b3": (BOTTLENECK,),
                   "head.prototypes": (OUT_DIM, BOTTLENECK)})
    out = {}
    for name, shape in shapes.items():
        fan_in = shape[-1] if len(shape) == 2 else 1
        t = torch.randn(shape, generator=gen, dtype=torch.float64) / fan_in ** 0.5
        if name.endswith("_w") and len(shape) == 1:
            t = 1.0 + 0.2 * t
        out[name] = t.float()
    return out


def backbone(p, x, gram_blocks=()):
    """(class token after the final layer norm [N, D], patch tokens after each block of
    gram_blocks) of images x [N, S, S]."""
    n, s, _ = x.shape
    g = s // PATCH
    patches = x.reshape(n, g, PATCH, g, PATCH).permute(0, 1, 3, 2, 4).reshape(n, g * g, PATCH * PATCH)
    pos = p["backbone.pos"]
    if pos.shape[0] != g:
        pos = F.interpolate(pos.permute(2, 0, 1)[None], size=(g, g), mode="bilinear", align_corners=False)[0]
        pos = pos.permute(1, 2, 0)
    h = F.linear(patches, p["backbone.patch_w"], p["backbone.patch_b"]) + pos.reshape(g * g, DIM)
    h = torch.cat([p["backbone.cls"].expand(n, 1, DIM), h], dim=1)
    tokens = []
    for i in range(DEPTH):
        q = lambda k: p[f"backbone.blocks.{i}.{k}"]  # noqa: E731
        a = F.layer_norm(h, (DIM,), q("ln1_w"), q("ln1_b"), eps=1e-5)
        qkv = F.linear(a, q("qkv_w"), q("qkv_b")).reshape(n, -1, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        att = torch.softmax(qkv[0] @ qkv[1].transpose(-2, -1) / (DIM // HEADS) ** 0.5, dim=-1)
        o = (att @ qkv[2]).transpose(1, 2).reshape(n, -1, DIM)
        h = h + F.linear(o, q("proj_w"), q("proj_b"))
        m = F.gelu(F.linear(F.layer_norm(h, (DIM,), q("ln2_w"), q("ln2_b"), eps=1e-5), q("fc1_w"), q("fc1_b")))
        h = h + F.linear(m, q("fc2_w"), q("fc2_b"))
        if i in gram_blocks:
            tokens.append(h[:, 1:])
    return F.layer_norm(h[:, 0], (DIM,), p["backbone.ln_w"], p["backbone.ln_b"], eps=1e-5), tokens


def head(p, f):
    """DINOHead (vision_transformer.py) with norm_last_layer=True: weight_g fixed at 1."""
    x = F.gelu(F.linear(f, p["head.w1"], p["head.b1"]))
    x = F.gelu(F.linear(x, p["head.w2"], p["head.b2"]))
    x = F.normalize(F.linear(x, p["head.w3"], p["head.b3"]), dim=-1, p=2)
    # nn.utils.weight_norm's weight: g * v / ||v|| per output row (torch._weight_norm, dim 0).
    w = torch._weight_norm(p["head.prototypes"], torch.ones(OUT_DIM, 1), 0)
    return F.linear(x, w)


def gram(t):
    x = F.normalize(t, dim=-1)
    return x @ x.transpose(1, 2)


def main():
    tsr, repo = sys.argv[1:3]
    negative = "--negative" in sys.argv
    gen = torch.Generator().manual_seed(0)
    student, teacher = init(gen), init(gen)
    g = torch.randn(2 * B, GLOBAL, GLOBAL, generator=gen)
    loc = torch.randn(N_LOCAL * B, LOCAL, LOCAL, generator=gen)
    center = 0.3 * torch.randn(OUT_DIM, generator=gen)

    # The teacher: global crops only, no gradient (main_dino.py: teacher_output = teacher(images[:2])).
    with torch.no_grad():
        ft, t_tokens = backbone(teacher, g, gram_blocks=(0, 1))
        t_out = head(teacher, ft)
        t_probs = F.softmax((t_out if negative else t_out - center) / TAU_T, dim=-1)
        t_mean = t_out.mean(dim=0)
        t_entropy = -(t_probs * torch.log(t_probs)).sum(-1).mean()
    sp = {k: v.clone().requires_grad_(True) for k, v in student.items()}
    fg, s_tokens = backbone(sp, g, gram_blocks=(0, 1))
    fl, _ = backbone(sp, loc)
    s_out = head(sp, torch.cat([fg, fl]))
    # DINOLoss.forward of main_dino.py.
    student_out = (s_out / STUDENT_TEMP).chunk(2 + N_LOCAL)
    teacher_out = t_probs.chunk(2)
    total, n_terms = 0.0, 0
    for iq, q in enumerate(teacher_out):
        for v in range(len(student_out)):
            if v == iq:
                continue
            total = total + torch.sum(-q * F.log_softmax(student_out[v], dim=-1), dim=-1).mean()
            n_terms += 1
    dino = total / n_terms
    gram_loss = sum(((gram(s) - gram(t)) ** 2).mean() for s, t in zip(s_tokens, t_tokens))
    loss = dino + GRAM_WEIGHT * gram_loss
    loss.backward()

    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        inputs = os.path.join(tmp, "dino_in.npz")
        out = os.path.join(tmp, "dino_out.npz")
        arrays = {"s." + k: v.numpy() for k, v in student.items()}
        arrays.update({"t." + k: v.numpy() for k, v in teacher.items()})
        arrays.update(g=g.numpy(), loc=loc.numpy(), center=center.numpy())
        np.savez(inputs, **arrays)
        cmd = [tsr, "run", os.path.join(repo, "tests", "dino", "dino_step.tsr"), "--device", "cpu",
               "--inputs", inputs, "--out", out, "--depth", str(DEPTH), "--heads", str(HEADS),
               "--patch", str(PATCH), "--tau", str(TAU_T), "--gram_mask", "3", "--gram_weight", str(GRAM_WEIGHT)]
        env = dict(os.environ, TESSERA_PATH=os.path.join(repo, "examples", "dino"))
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        if r.returncode != 0:
            print(f"FAIL: {' '.join(cmd)}: exit {r.returncode}\n{r.stdout}{r.stderr}")
            return 1
        print(r.stdout, end="")
        ours = dict(np.load(out))
    pairs = [("t_probs", t_probs), ("t_mean", t_mean), ("t_entropy", t_entropy), ("dino", dino),
             ("gram", gram_loss)]
    pairs = [(n, ours[n], v.detach()) for n, v in pairs]
    pairs += [(f"grad {k}", ours["grad." + k], v.grad) for k, v in sorted(sp.items())]
    tol = 1e-4
    worst = 0.0
    for name, a, b in pairs:
        a = torch.as_tensor(a, dtype=torch.float64)
        b = b.to(torch.float64)
        e = float((a - b).norm() / max(float(b.norm()), 1e-30)) if a.shape == b.shape else float("inf")
        worst = max(worst, e)
        if not e <= tol:
            failures.append(f"{name} differ: relative error {e:.3e} > {tol:.0e}")
        print(f"{name:34s} relative error {e:.2e}")
    print(f"dino loss: Tessera {float(ours['dino']):.6f}, PyTorch {float(dino):.6f}; "
          f"gram: Tessera {float(ours['gram']):.6f}, PyTorch {float(gram_loss):.6f}")
    for f in failures:
        print("FAIL: " + f)
    print(f"dino_torch: {'FAIL' if failures else 'ok'} ({len(pairs)} tensors compared, {len(failures)} differ; "
          f"worst relative error {worst:.1e}, tolerance {tol:.0e})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
