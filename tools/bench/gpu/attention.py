"""The attention benchmark's PyTorch side (tools/bench/gpu/attention.sh): the same cases as
attention.tsr, F.scaled_dot_product_attention over bf16 q, k, v [b, h, s, d] with each of its fused
backends (flash, cuDNN, memory-efficient) where this torch and GPU have it, forward and
forward+backward (out.backward(g), g = ones), timed the same way (best of rounds of reps,
synchronized at the end of each round). Prints `NAME SECONDS_PER_CALL BACKEND` for the fastest
backend of each case, and `# NAME BACKEND SECONDS` for every backend tried.
    python3 attention.py REPS ROUNDS B H S D"""
import sys
from timing import best_of

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

reps, rounds, b, h, s, d = (int(v) for v in sys.argv[1:7])
g = torch.Generator(device="cuda").manual_seed(0)
shape = (b, h, s, d)
q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
grad = torch.ones(shape, device="cuda", dtype=torch.bfloat16)
tag = f"d{d}_s{s}"


backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
for causal in (False, True):
    for bwd in (False, True):
        name = ("fwdbwd" if bwd else "fwd") + ("_causal" if causal else "") + "_" + tag
        best = None
        for bname, be in backends:
            qq, kk, vv = (t.detach().requires_grad_(bwd) for t in (q, k, v))

            def run():
                with sdpa_kernel(be):
                    o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)
                    if bwd:
                        o.backward(grad)
            try:
                t = best_of(run, reps, rounds)
            except Exception as e:  # noqa: BLE001 (a backend this GPU or shape lacks)
                print(f"# {name} {bname} unavailable: {type(e).__name__}", file=sys.stderr)
                continue
            print(f"# {name} {bname} {t:.6f}")
            if best is None or t < best[0]:
                best = (t, bname)
        if best:
            print(f"{name} {best[0]:.6f} {best[1]}")
