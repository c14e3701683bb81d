"""The GEMM benchmark's PyTorch side (tools/bench/gpu/gemm.sh): the cases of gemm.tsr with cuBLAS
(torch's `a @ b` and `a @ bt.T` on bf16 CUDA tensors), timed the same way (best of rounds of
reps, synchronized at the end of each round). Prints `NAME SECONDS_PER_CALL`."""
import sys
from timing import best_of

import torch

reps, rounds = (int(v) for v in sys.argv[1:3]) if len(sys.argv) > 2 else (10, 3)
g = torch.Generator(device="cuda").manual_seed(0)
for name, size in [("nn_4096", 4096), ("nn_8192", 8192), ("nn_4000", 4000), ("nt_4096", 4096), ("nt_8192", 8192)]:
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16, generator=g)
    f = (lambda: a @ b.T) if name.startswith("nt") else (lambda: a @ b)
    print(f"{name} {best_of(f, reps, rounds):.6f}")
