#!/usr/bin/env python3
"""KVCache decoding (spec 14) against NumPy (ctest kvcache_decode).

  test_kvcache.py TSR REPO [--negative-causal | --negative-window]

decode.tsr reads random q, k, v [2, 3, 11, 8] (f32) and decodes them three ways with
nn.flash_attention(q, cache, causal=True): a fixed cache (a prefill of 4, then one position per
step), a rolling window of 5 (a prefill of 3, then one position per step) and a rolling window of
5 filled 3 positions at a time (chunks that wrap around its slots); and the fixed cache's decoding
again with the loop in host code (a graph call per step carrying the cache) and mapped over the
batch with vmap (a cache of batch 1 per example). NumPy computes, in f64, what
spec 14 says each call sees: the queries of a chunk [a, b) are the last b - a positions, and query
t attends to the positions p <= t that the cache holds after the append (all of 0 .. b - 1, or in
a rolling window of W the last W: b - W <= p). Each output must match within 1e-5 (f32), and each
cache's final length must be 11 for the fixed caches and 5 for the windows.

The negative controls change the reference, and the comparison must catch it (expect.py looks
for the FAIL lines): --negative-causal attends with a top-left causal mask (query t of a chunk sees
positions p <= t - a: "FAIL: fixed", "FAIL: host", "FAIL: vmap"); --negative-window ignores the window (every position seen so
far: "FAIL: window" and "FAIL: chunks", while "ok fixed").
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from torch_python import reexec_with_torch  # noqa: E402

reexec_with_torch("kvcache_decode")

import numpy as np  # noqa: E402

B, H, N, D = 2, 3, 11, 8
TOL = 1e-5


def reference(q, k, v, chunks, window, negative):
    """The attention of each chunk's queries over what the cache holds after its append."""
    out = np.zeros_like(q)
    for a, b in chunks:
        lo = 0 if window is None or negative == "window" else max(0, b - window)
        for t in range(a, b):
            hi = max(lo, t - a) if negative == "causal" else t  # the last position query t sees
            ks, vs = k[:, :, lo:hi + 1], v[:, :, lo:hi + 1]
            s = np.einsum("bhd,bhpd->bhp", q[:, :, t], ks) / np.sqrt(D)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            p = s / s.sum(axis=-1, keepdims=True)
            out[:, :, t] = np.einsum("bhp,bhpd->bhd", p, vs)
    return out


def main():
    if len(sys.argv) < 3:
        print("usage: test_kvcache.py TSR REPO [--negative]")
        return 2
    tsr, repo = sys.argv[1], sys.argv[2]
    negative = "causal" if "--negative-causal" in sys.argv[3:] else "window" if "--negative-window" in sys.argv[3:] else None
    rng = np.random.default_rng(20)
    q, k, v = (rng.standard_normal((B, H, N, D)).astype(np.float32) for _ in range(3))
    cases = {
        "fixed": ([(0, 4)] + [(t, t + 1) for t in range(4, N)], None, N),
        "window": ([(0, 3)] + [(t, t + 1) for t in range(3, N)], 5, 5),
        "chunks": ([(0, 3), (3, 6), (6, 9), (9, 11)], 5, 5),
        "host": ([(0, 4)] + [(t, t + 1) for t in range(4, N)], None, N),
        "vmap": ([(0, 4)] + [(t, t + 1) for t in range(4, N)], None, N),
    }
    failed = 0
    with tempfile.TemporaryDirectory() as d:
        for name, x in (("q", q), ("k", k), ("v", v)):
            np.save(os.path.join(d, name + ".npy"), x)
        r = subprocess.run([tsr, "run", os.path.join(HERE, "decode.tsr"), "--device", "cpu", "--dir", d],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            print(r.stdout + r.stderr)
            print("FAIL: decode.tsr exited with %d" % r.returncode)
            return 1
        for name, (chunks, window, length) in cases.items():
            got = np.load(os.path.join(d, name + ".npy"))
            lengths = np.load(os.path.join(d, name + "_length.npy")).reshape(-1)  # one per example for vmap
            n = int(lengths[0]) if (lengths == lengths[0]).all() else -1
            want = reference(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), chunks, window, negative)
            err = float(np.abs(got - want).max())
            ok = err <= TOL and got.shape == want.shape
            print("%s %s: max abs error %.3g (tolerance %g), length %d (expected %d)" % ("ok" if ok else "FAIL:", name, err, TOL, n, length))
            if n != length:
                print("FAIL: %s length %d, expected %d" % (name, n, length))
                ok = False
            failed += not ok
    print("kvcache_decode: %d passed, %d failed" % (len(cases) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
