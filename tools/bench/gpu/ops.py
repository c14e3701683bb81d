"""The GPU benchmark's PyTorch side (tools/bench/gpu/ops.sh): the same ops and sizes as ops.tsr,
eager (cuBLAS for the GEMM; F.rms_norm where this torch has it, else x * rsqrt(mean(x^2) + eps) * w)
and, for the normalizations, under torch.compile (`NAME_compiled`, Inductor's Triton kernels), plus
`copy` (x.clone(): the device's copy bandwidth for the same bytes), timed the same way (best of
rounds of reps, synchronized at the end of each round). Prints `NAME SECONDS_PER_CALL`."""
import sys
from timing import best_of

import torch

reps, rounds, size, rows, cols = 5, 3, 4096, 32768, 4096
if len(sys.argv) > 1:
    reps, rounds, size, rows, cols = (int(v) for v in sys.argv[1:6])
g = torch.Generator(device="cuda").manual_seed(0)
a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16, generator=g)
b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16, generator=g)
x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16, generator=g)
w = torch.ones(cols, device="cuda", dtype=torch.bfloat16)
bias = torch.zeros(cols, device="cuda", dtype=torch.bfloat16)


def bench(name, f):
    print(f"{name} {best_of(f, reps, rounds):.6f}")


bench("gemm", lambda: a @ b)
bench("layer_norm", lambda: torch.nn.functional.layer_norm(x, (cols,), w, bias))
bench("gelu_tanh", lambda: torch.nn.functional.gelu(x, approximate="tanh"))
bench("softmax", lambda: torch.softmax(x, -1))


def rms(t, weight):
    if hasattr(torch.nn.functional, "rms_norm"):
        return torch.nn.functional.rms_norm(t, (cols,), weight, eps=1e-6)
    return (t.float() * torch.rsqrt(t.float().pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(t.dtype)


bench("rms_norm", lambda: rms(x, w))


bench("copy", lambda: x.clone())
# torch.compile of the same functions (a failure to compile skips the line, with the reason).
for name, f in [("layer_norm", lambda t: torch.nn.functional.layer_norm(t, (cols,), w, bias)),
                ("softmax", lambda t: torch.softmax(t, -1)),
                ("rms_norm", lambda t: rms(t, w))]:
    try:
        cf = torch.compile(f)
        bench(name + "_compiled", lambda: cf(x))
    except Exception as e:  # noqa: BLE001
        print(f"# {name}_compiled: torch.compile failed: {type(e).__name__}: {e}", file=sys.stderr)
