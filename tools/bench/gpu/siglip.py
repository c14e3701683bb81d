"""The SigLIP-style encoder benchmark's PyTorch side (tools/bench/gpu/siglip.sh runs it beside
examples/siglip/siglip.tsr), and the PyTorch model that tests/run/siglip_torch.py compares
Tessera's forward and gradients with.

The model is siglip.tsr's: a linear patch embedding, learned position embeddings looked up by
position id, `depth` pre-norm blocks (LayerNorm eps 1e-6, fused QKV, attention with a key mask
built once per forward pass, tanh-GELU MLP) and a final LayerNorm. The attention is
F.scaled_dot_product_attention with a boolean mask [B, 1, 1, S] where torch has it (2.0 and
later), else the same computation written out (softmax in f32, f64 for f64).

    python3 siglip.py [--width 1152 --depth 27 --heads 16 --mlp 4304 --batch 64 --grid 16
                       --patch 14 --dtype bf16 --ragged 1 --steps 10 --device cuda
                       --modes eager,compile]

prints, per mode, `MODE forward_ms X backward_ms Y peak_MiB Z` (the means over `steps` training
steps after warm-up ones; forward with autograd recording, then loss.backward(); peak: the most
memory torch's caching allocator had allocated over the timed steps, on a GPU).
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PATCH_CHANNELS = 3


def attention(q, k, v, mask):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    s = (q.to(acc) @ k.to(acc).transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1).to(v.dtype) @ v


class Block(nn.Module):
    def __init__(self, width, heads, mlp):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width, eps=1e-6)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width, eps=1e-6)
        self.fc1 = nn.Linear(width, mlp)
        self.fc2 = nn.Linear(mlp, width)

    def forward(self, h, mask):
        b, t, w = h.shape
        q, k, v = self.qkv(self.ln1(h)).split(w, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, w // self.heads).transpose(1, 2) for z in (q, k, v))
        o = attention(q, k, v, mask).transpose(1, 2).reshape(b, t, w)
        h = h + self.proj(o)
        return h + self.fc2(F.gelu(self.fc1(self.ln2(h)), approximate="tanh"))


class SigLIPEncoder(nn.Module):
    def __init__(self, width, depth, heads, mlp, grid, patch):
        super().__init__()
        self.patch = nn.Linear(PATCH_CHANNELS * patch * patch, width)
        self.pos = nn.Parameter(torch.zeros(grid * grid, width))
        self.blocks = nn.ModuleList(Block(width, heads, mlp) for _ in range(depth))
        self.post = nn.LayerNorm(width, eps=1e-6)

    def forward(self, pixels, pos_ids, valid, masked=True):
        # The key mask, once for every layer (None without ragged images: SDPA's fastest kernels
        # take no mask).
        mask = valid[:, None, None, :] if masked else None
        h = self.patch(pixels) + self.pos[pos_ids.long()]
        for blk in self.blocks:
            h = blk(h, mask)
        return self.post(h)

    # The parameters named as siglip.tsr's flatten() names them.
    def named_like_tessera(self):
        out = {"patch_w": self.patch.weight, "patch_b": self.patch.bias, "pos": self.pos,
               "post_w": self.post.weight, "post_b": self.post.bias}
        for i, blk in enumerate(self.blocks):
            for name, mod in (("ln1", blk.ln1), ("qkv", blk.qkv), ("proj", blk.proj), ("ln2", blk.ln2),
                              ("fc1", blk.fc1), ("fc2", blk.fc2)):
                out[f"blocks.{i}.{name}_w"] = mod.weight
                out[f"blocks.{i}.{name}_b"] = mod.bias
        return out


def loss_fn(out, valid):
    of = out.to(torch.float64 if out.dtype == torch.float64 else torch.float32)
    vm = valid.to(of.dtype)[:, :, None]
    return (of * of * vm).sum() / (vm.sum() * of.shape[-1])


def make_batch(batch, grid, patch, ragged, dtype, device, gen):
    s = grid * grid
    lo = grid // 2 if ragged else grid
    hs = torch.randint(lo, grid + 1, (batch,), generator=gen)
    ws = torch.randint(lo, grid + 1, (batch,), generator=gen)
    p = torch.arange(s)
    valid = p[None, :] < (hs * ws)[:, None]
    pos_ids = torch.where(valid, (p[None, :] // ws[:, None]) * grid + p[None, :] % ws[:, None], torch.zeros_like(p[None, :]))
    pixels = torch.randn(batch, s, PATCH_CHANNELS * patch * patch, generator=gen) * valid[:, :, None]
    return pixels.to(device, dtype), pos_ids.to(device), valid.to(device)


def main():
    ap = argparse.ArgumentParser()
    for name, default in (("width", 1152), ("depth", 27), ("heads", 16), ("mlp", 4304), ("batch", 64), ("grid", 16),
                          ("patch", 14), ("ragged", 1), ("steps", 10)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--modes", default="eager,compile")
    a = ap.parse_args()
    dtype = {"bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64}[a.dtype]
    cuda = a.device.startswith("cuda")
    gen = torch.Generator().manual_seed(0)
    pixels, pos_ids, valid = make_batch(a.batch, a.grid, a.patch, bool(a.ragged), dtype, a.device, gen)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name() if cuda else 'cpu'}: width {a.width}, depth {a.depth}, "
          f"{a.heads} heads, mlp {a.mlp}, batch {a.batch} x {a.grid * a.grid} patches ({int(valid.sum())} real), {a.dtype}")

    def sync():
        if cuda:
            torch.cuda.synchronize()

    for mode in a.modes.split(","):
        if mode == "compile" and not hasattr(torch, "compile"):
            print(f"{mode} skipped: torch {torch.__version__} has no torch.compile")
            continue
        torch.manual_seed(0)
        model = SigLIPEncoder(a.width, a.depth, a.heads, a.mlp, a.grid, a.patch).to(a.device, dtype)
        fwd = torch.compile(model) if mode == "compile" else model

        def step():
            t0 = time.perf_counter()
            loss = loss_fn(fwd(pixels, pos_ids, valid, masked=bool(a.ragged)), valid)
            sync()
            t1 = time.perf_counter()
            loss.backward()
            sync()
            return t1 - t0, time.perf_counter() - t1

        for _ in range(3):
            step()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        f = b = 0.0
        for _ in range(a.steps):
            tf, tb = step()
            f += tf
            b += tb
        peak = f"{torch.cuda.max_memory_allocated() / 2**20:.0f}" if cuda else "n/a"
        print(f"{mode} forward_ms {f / a.steps * 1e3:.3f} backward_ms {b / a.steps * 1e3:.3f} peak_MiB {peak}")
        del model, fwd
        if cuda:
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
