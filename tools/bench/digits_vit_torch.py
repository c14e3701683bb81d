#!/usr/bin/env python3
"""examples/digits_vit.tsr written in PyTorch: the same model, data, split sizes and training.

    digits_vit_torch.py [--epochs 30] [--batch 64] [--lr 3e-3] [--seed 0] [--threads 2]
                        [--data examples/data/digits.csv.gz]

The reference of tools/bench/digits_vit_race.py (time to 95% test accuracy) and of the training
step in tools/bench/cpu_ops.py. Same architecture (4x4 patches, a class token, position
embeddings, 2 pre-norm blocks of 4-head attention and a GELU (erf) MLP of width 64, a linear
head on the class token's layer norm), the same initialisation rules (LeCun-normal [out, in]
weights, the head's a tenth of that, class token and positions std 0.02, zero biases, identity
layer norms), AdamW (betas 0.9/0.999, eps 1e-8, weight decay 0.05 on every parameter, as
stdlib/optim/adamw.tsr) with one epoch of linear warm-up and a cosine decay to zero, batches of
64 from a fresh permutation each epoch, the last n_train % batch images sitting out. The
random draws are torch's, not Tessera's Philox, so the split and the initial values differ:
compare times and curves, not bits.

Prints the same epoch lines as the .tsr program:
    epoch 10/30  loss 0.0318  train_acc  99.7%  test_acc  98.1%  time 0.7s
"""
import gzip
import math
import os
import sys
import time

IMAGE, PATCH, DIM, HEADS, DEPTH, MLP_RATIO, CLASSES = 8, 4, 32, 4, 2, 2, 10


def _ensure_torch():
    try:
        import torch  # noqa: F401
        return
    except ImportError:
        pass
    for c in [os.environ.get("TSR_TORCH_PYTHON"), "/usr/bin/python3"]:
        if c and os.path.exists(c) and os.path.realpath(c) != os.path.realpath(sys.executable):
            os.execv(c, [c, os.path.abspath(sys.argv[0])] + sys.argv[1:])
    sys.exit(f"{os.path.basename(sys.argv[0])}: needs a Python with torch (set TSR_TORCH_PYTHON)")


def build_model():
    import torch
    from torch import nn
    import torch.nn.functional as F

    def dense(fan_in, fan_out, scale=1.0):
        return nn.Parameter(torch.randn(fan_out, fan_in) * (1.0 / fan_in) ** 0.5 * scale)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1_w, self.ln1_b = nn.Parameter(torch.ones(DIM)), nn.Parameter(torch.zeros(DIM))
            self.qkv_w, self.qkv_b = dense(DIM, 3 * DIM), nn.Parameter(torch.zeros(3 * DIM))
            self.proj_w, self.proj_b = dense(DIM, DIM), nn.Parameter(torch.zeros(DIM))
            self.ln2_w, self.ln2_b = nn.Parameter(torch.ones(DIM)), nn.Parameter(torch.zeros(DIM))
            self.fc1_w, self.fc1_b = dense(DIM, MLP_RATIO * DIM), nn.Parameter(torch.zeros(MLP_RATIO * DIM))
            self.fc2_w, self.fc2_b = dense(MLP_RATIO * DIM, DIM), nn.Parameter(torch.zeros(DIM))

        def forward(self, h):
            b, t, _ = h.shape
            a = F.layer_norm(h, (DIM,), self.ln1_w, self.ln1_b)
            q, k, v = F.linear(a, self.qkv_w, self.qkv_b).split(DIM, dim=-1)
            q, k, v = (z.reshape(b, t, HEADS, DIM // HEADS).transpose(1, 2) for z in (q, k, v))
            s = (q @ k.transpose(-1, -2)) * (DIM // HEADS) ** -0.5
            o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, t, DIM)
            h = h + F.linear(o, self.proj_w, self.proj_b)
            m = F.layer_norm(h, (DIM,), self.ln2_w, self.ln2_b)
            m = F.gelu(F.linear(m, self.fc1_w, self.fc1_b))
            return h + F.linear(m, self.fc2_w, self.fc2_b)

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            tokens = (IMAGE // PATCH) ** 2 + 1
            self.patch_w, self.patch_b = dense(PATCH * PATCH, DIM), nn.Parameter(torch.zeros(DIM))
            self.cls = nn.Parameter(torch.randn(1, 1, DIM) * 0.02)
            self.pos = nn.Parameter(torch.randn(tokens, DIM) * 0.02)
            self.blocks = nn.ModuleList([Block() for _ in range(DEPTH)])
            self.ln_w, self.ln_b = nn.Parameter(torch.ones(DIM)), nn.Parameter(torch.zeros(DIM))
            self.head_w, self.head_b = dense(DIM, CLASSES, 0.1), nn.Parameter(torch.zeros(CLASSES))

        def forward(self, x):
            b, g = x.shape[0], IMAGE // PATCH
            p = x.reshape(b, g, PATCH, g, PATCH).permute(0, 1, 3, 2, 4).reshape(b, g * g, PATCH * PATCH)
            h = F.linear(p, self.patch_w, self.patch_b)
            h = torch.cat((self.cls.expand(b, 1, DIM), h), dim=1) + self.pos
            for blk in self.blocks:
                h = blk(h)
            c = F.layer_norm(h[:, 0, :], (DIM,), self.ln_w, self.ln_b)
            return F.linear(c, self.head_w, self.head_b)

    return ViT()


def load_digits(path):
    import torch
    with gzip.open(path, "rt") as f:
        rows = [[float(v) for v in line.split(",")] for line in f if line.strip() and line[0].isdigit()]
    t = torch.tensor(rows, dtype=torch.float32)
    return t[:, :64] / 16.0, t[:, 64].long()


def schedule(lr, step, total, warmup):
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return lr * 0.5 * (1.0 + math.cos(math.pi * frac))


def make_optimizer(model, lr):
    import torch
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05)


def train_step(model, opt, xb, yb):
    import torch.nn.functional as F
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(xb), yb)
    loss.backward()
    opt.step()
    return float(loss)


def main():
    _ensure_torch()
    import argparse
    import torch
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "..", "..", "examples", "data", "digits.csv.gz"))
    a = ap.parse_args()
    t_start = time.perf_counter()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    x, y = load_digits(a.data)
    n = x.shape[0]
    order = torch.randperm(n)
    x, y = x[order], y[order]
    n_test = n // 5
    x_test, y_test, x_train, y_train = x[:n_test], y[:n_test], x[n_test:], y[n_test:]
    n_train = n - n_test
    steps = n_train // a.batch
    model = build_model()
    opt = make_optimizer(model, a.lr)
    print(f"digits: {n} images, {n_train} train / {n_test} test; PyTorch {torch.__version__}, "
          f"{a.threads} threads; {a.epochs} epochs of {steps} steps of {a.batch}", flush=True)
    total, step, test_acc = a.epochs * steps, 0, 0.0
    for epoch in range(a.epochs):
        t0 = time.perf_counter()
        perm = torch.randperm(n_train)
        loss_sum = 0.0
        model.train()
        for i in range(steps):
            idx = perm[i * a.batch:(i + 1) * a.batch]
            for g in opt.param_groups:
                g["lr"] = schedule(a.lr, step, total, steps)
            loss_sum += train_step(model, opt, x_train[idx], y_train[idx])
            step += 1
        with torch.no_grad():
            test_acc = float((model(x_test).argmax(-1) == y_test).float().mean())
            train_acc = float((model(x_train).argmax(-1) == y_train).float().mean())
        print(f"epoch {epoch + 1:>2}/{a.epochs}  loss {loss_sum / steps:.4f}  train_acc {train_acc:6.1%}  "
              f"test_acc {test_acc:6.1%}  time {time.perf_counter() - t0:.1f}s", flush=True)
    print(f"final test accuracy {test_acc:.1%} ({n_test} images) after {a.epochs} epochs, "
          f"total time {time.perf_counter() - t_start:.1f}s", flush=True)


if __name__ == "__main__":
    main()
