"""The GEMM benchmark's PyTorch side (tools/bench/gpu/gemm.sh): the cases of gemm.tsr with cuBLAS
(torch's `a @ b` and `a @ bt.T` on bf16 CUDA tensors), timed the same way (best of rounds of
reps, synchronized at the end of each round). Prints `NAME SECONDS_PER_CALL M N K`."""
import sys
from timing import best_of

import torch

reps, rounds = (int(v) for v in sys.argv[1:3]) if len(sys.argv) > 2 else (10, 3)
g = torch.Generator(device="cuda").manual_seed(0)
CASES = [("nn_4096", 4096, 4096, 4096), ("nn_8192", 8192, 8192, 8192), ("nn_4000", 4000, 4000, 4000),
         ("nt_4096", 4096, 4096, 4096), ("nt_8192", 8192, 8192, 8192), ("nt_qkv", 50432, 2304, 768),
         ("nt_proj", 50432, 768, 768), ("nt_fc1", 50432, 3072, 768), ("nt_fc2", 50432, 768, 3072)]
g = torch.Generator(device="cuda").manual_seed(0)
for name, m, n, k in CASES:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    nt = name.startswith("nt")
    b = torch.randn(*((n, k) if nt else (k, n)), device="cuda", dtype=torch.bfloat16, generator=g)
    f = (lambda: a @ b.T) if nt else (lambda: a @ b)
    print(f"{name} {best_of(f, reps, rounds):.6f} {m} {n} {k}")
