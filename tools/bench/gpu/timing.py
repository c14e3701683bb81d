"""The PyTorch sides' timing of the GPU benchmarks (ops.py, gemm.py, attention.py), the same as
their Tessera sides': one warm-up call, then the best of `rounds` rounds of `reps` calls, each
round ended by synchronizing the device. Returns seconds per call."""
import time

import torch


def best_of(f, reps, rounds):
    f()
    torch.cuda.synchronize()
    best = 1e30
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best
