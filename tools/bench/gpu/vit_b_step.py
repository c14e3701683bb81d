"""The ViT-B/16 training step benchmark's PyTorch side (tools/bench/gpu/vit_b_step.sh): the model
of vit_b_step.tsr as a torch.nn.Module (pre-norm blocks, F.scaled_dot_product_attention, GELU
(erf), a 1000-class head on the class token), bf16 parameters, activations and AdamW state,
eager and under torch.compile. Prints `step_eager SECONDS LOSS`, `step_compiled SECONDS LOSS`
(the best of STEPS timed steps after warm-up steps that compile) and `peak_MiB_eager N`,
`peak_MiB_compiled N` (torch.cuda.max_memory_reserved over the timed steps).
    python3 vit_b_step.py BATCH TOKENS STEPS"""
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

batch, tokens, steps = (int(v) for v in sys.argv[1:4])
DIM, HEADS, DEPTH, MLP, CLASSES = 768, 12, 12, 3072, 1000


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.ln2 = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, MLP)
        self.fc2 = nn.Linear(MLP, DIM)

    def forward(self, h):
        b, t, _ = h.shape
        q, k, v = self.qkv(self.ln1(h)).split(DIM, dim=-1)
        q, k, v = (z.reshape(b, t, HEADS, DIM // HEADS).transpose(1, 2) for z in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, DIM)
        h = h + self.proj(o)
        return h + self.fc2(F.gelu(self.fc1(self.ln2(h))))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.ln = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x)[:, 0])


def run(compiled):
    torch.manual_seed(0)
    model = ViT().cuda().to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(batch, tokens, DIM, device="cuda", dtype=torch.bfloat16, generator=g)
    y = torch.randint(0, CLASSES, (batch,), device="cuda", generator=g)
    fwd = torch.compile(model) if compiled else model

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(fwd(x).float(), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    best, loss = 1e30, None
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step().item()
        best = min(best, time.perf_counter() - t0)
    name = "compiled" if compiled else "eager"
    print(f"step_{name} {best:.6f} {loss:.4f}")
    print(f"peak_MiB_{name} {torch.cuda.max_memory_reserved() / 2**20:.0f}")
    del model, opt
    torch.cuda.empty_cache()


run(False)
run(True)
