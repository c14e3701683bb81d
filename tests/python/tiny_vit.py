"""The ViT of issue 14 for the package's tests (test_tessera.py on the CPU, test_tessera_cuda.py
on a GPU): a small PyTorch ViT whose layer norms and attention are Tessera's (the stdlib's
nn.layer_norm and nn.scaled_dot_product_attention through the package), trained beside the same
model in plain PyTorch."""
import torch
import torch.nn.functional as F


class TinyViT(torch.nn.Module):
    """The design documents' integration point: a PyTorch ViT whose layer norms and attention are
    Tessera's, or PyTorch's own with `tessera_ops=None`; same parameters either way."""

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


def train_side_by_side(ops, device="cpu", steps=3, seed=2):
    """`steps` SGD steps of the Tessera ViT and the PyTorch one from the same parameters and
    batch, on `device`. Returns (the largest |difference| of any parameter's gradient over the
    steps, the Tessera model's losses)."""
    torch.manual_seed(seed)
    vit_t = TinyViT(ops).to(device)
    vit_p = TinyViT(None).to(device)
    vit_p.load_state_dict(vit_t.state_dict())
    opt_t = torch.optim.SGD(vit_t.parameters(), lr=0.05)
    opt_p = torch.optim.SGD(vit_p.parameters(), lr=0.05)
    images, labels = torch.randn(8, 4, 4).to(device), torch.randint(0, 3, (8,)).to(device)
    worst, losses = 0.0, []
    for _ in range(steps):
        for net, opt in ((vit_t, opt_t), (vit_p, opt_p)):
            opt.zero_grad()
            loss = F.cross_entropy(net(images), labels)
            loss.backward()
            if net is vit_t:
                losses.append(float(loss))
        for (_, a), (_, b) in zip(vit_t.named_parameters(), vit_p.named_parameters()):
            worst = max(worst, float((a.grad - b.grad).abs().max()))
        opt_t.step()
        opt_p.step()
    return worst, losses
