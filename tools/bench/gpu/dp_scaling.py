"""PyTorch DDP's side of tools/bench/gpu/dp_scaling.sh, under torchrun: vit_b_step.py's ViT-B/16
(bf16, AdamW) wrapped in DistributedDataParallel (NCCL, its default 25 MiB gradient buckets
all-reduced while the backward runs), `batch` rows per GPU. Rank 0 prints `ranks N` and
`step_ddp BEST MEAN LOSS` (seconds; each step ended by reading the loss)."""
import os
import sys
import time

import torch
import torch.distributed as tdist
import torch.nn.functional as F

batch = int(sys.argv[1]) if len(sys.argv) > 1 else 64
tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 197
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 10
# vit_b_step.py's model, without its module-level runs (its text up to `def run(`).
_src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "vit_b_step.py")).read()
_argv, sys.argv = sys.argv, [sys.argv[0], str(batch), str(tokens), str(steps)]
vb = type(sys)("vit_b_step_model")
exec(compile(_src[:_src.index("\ndef run(")], "vit_b_step.py", "exec"), vb.__dict__)
sys.argv = _argv

def main():
    tdist.init_process_group("nccl")
    rank, n = tdist.get_rank(), tdist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    torch.manual_seed(0)
    model = vb.ViT().cuda().to(torch.bfloat16)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, weight_decay=0.05)
    g = torch.Generator(device="cuda").manual_seed(rank)
    x = torch.randn(batch, tokens, vb.DIM, device="cuda", dtype=torch.bfloat16, generator=g)
    y = torch.randint(0, vb.CLASSES, (batch,), device="cuda", generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(x).float(), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    best, total, loss = 1e30, 0.0, None
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step().item()
        dt = time.perf_counter() - t0
        best, total = min(best, dt), total + dt
    if rank == 0:
        print(f"ranks {n}")
        print(f"step_ddp {best:.6f} {total / steps:.6f} {loss:.4f}", flush=True)
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
