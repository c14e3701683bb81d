"""The ViT-B/16 step's kernels in PyTorch, eager and under torch.compile, grouped as
tools/bench/trace_summary.py groups Tessera's (products, attention, Triton's fused kernels, the
rest): device time of one whole step from torch.profiler, after 3 warm-up steps, and the top
kernels. The model and step are vit_b_step.py's (imported from its source), batch 256 x 197.
    python3 tools/bench/gpu/vit_b_kernels_torch.py
Compare with `tsr run --profile trace.json tools/bench/gpu/vit_b_step.tsr --device cuda --steps 2`
in the same call (docs/performance.md has a table of both)."""
import collections
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.argv = ["vit_b_step.py", "256", "197", "1"]
src = open(os.path.join(HERE, "vit_b_step.py")).read().split("\nrun(False)")[0]
g = {}
exec(compile(src, "vit_b_step.py", "exec"), g)
ViT, F = g["ViT"], g["F"]
for compiled in (False, True):
    torch.manual_seed(0)
    model = ViT().cuda().to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05, fused=False)
    x = torch.randn(256, 197, 768, device="cuda", dtype=torch.bfloat16)
    y = torch.randint(0, 1000, (256,), device="cuda")
    fwd = torch.compile(model) if compiled else model
    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(fwd(x).float(), y); loss.backward(); opt.step()
    for _ in range(3): step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
        step(); torch.cuda.synchronize()
    tot = collections.Counter(); cnt = collections.Counter(); names = collections.Counter()
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            n = e.name.lower(); us = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            k = ("gemm" if any(s in n for s in ("gemm", "nvjet", "cutlass", "sm90_xmma", "matmul")) else
                 "attention" if any(s in n for s in ("flash", "fmha", "attention", "cudnn")) else
                 "triton" if "triton" in n else "memcpy/set" if "memc" in n or "memset" in n else "other")
            tot[k] += us; cnt[k] += 1; names[e.name[:90]] += us
    print("compiled" if compiled else "eager", "kernels:", sum(cnt.values()), "device ms: %.1f" % (sum(tot.values()) / 1e3))
    for k, v in tot.most_common(): print("  %-12s %8.1f ms %5d kernels" % (k, v / 1e3, cnt[k]))
    for n, v in names.most_common(12): print("    %8.2f ms  %s" % (v / 1e3, n))
    del model, opt; torch.cuda.empty_cache()
