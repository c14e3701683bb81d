"""PyTorch eager's launch overhead on the GPU: `x + 1` on 1024 f32, n times, synchronized once
at the end; prints µs per op (tools/gpu/suite.sh runs it beside launch_overhead.tsr)."""
import sys
import time

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
x = torch.zeros(1024, device="cuda")
for _ in range(100):
    x = x + 1
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(n):
    x = x + 1
torch.cuda.synchronize()
dt = time.perf_counter() - t0
print(f"pytorch eager: {n} ops, {dt * 1e6 / n:.2f} us per op (x[0] = {x[0].item():.0f})")
