#!/usr/bin/env python3
"""The attention kernels read the heads' strided views in place (ctest kernel_views).

    kernel_views.py TSR [--device cpu|cuda] [--negative]

Runs tests/nn/kernel_views.tsr (values and gradients of flash attention over the heads' views of
a fused [B, T, 3C] projection against the f32 composition) under `tsr run --profile`, every step
compiled (TSR_JIT_THRESHOLD=0, so that no copy runs as an unlogged host loop), and counts the copy
programs launched at each flash kernel's launch in stdlib/nn.tsr. The compiled executor passes a
strided operand to a kernel as a view and sets the zeros the kernel writes into by a memset
(exec/CompiledExecutor.cpp, kernelInPlace), so no copy runs there; each copy of q, k, v or dO, or
a zero-filled output materialized by a copy program, adds one. Autotuning is off
(TSR_AUTOTUNE=off): its timing runs would add launches.

--negative: TSR_KERNEL_VIEWS=0 (the views copied, as for any library step): the counts must be
wrong and the check FAIL (ctest negative_kernel_views).
"""
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# The flash kernels whose launches are counted, and the copies each launch may have (none).
WRITTEN = {"flash_attention_fwd": 0, "flash_attention_bwd_dkdv": 0, "flash_attention_bwd_dq": 0}


def launch_lines():
    """The line of each flash kernel's launch in stdlib/nn.tsr."""
    lines = {}
    with open(os.path.join(ROOT, "stdlib", "nn.tsr")) as f:
        for n, text in enumerate(f, 1):
            m = re.match(r"\s*kernels\.(flash_attention_\w+)\[", text)
            if m and m.group(1) in WRITTEN:
                lines[m.group(1)] = n
    return lines


def main():
    tsr = sys.argv[1]
    device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cpu"
    negative = "--negative" in sys.argv
    env = dict(os.environ, TSR_JIT_THRESHOLD="0", TSR_AUTOTUNE="off")
    if negative:
        env["TSR_KERNEL_VIEWS"] = "0"
    lines = launch_lines()
    if set(lines) != set(WRITTEN):
        print(f"FAIL: the flash kernels' launches not found in stdlib/nn.tsr: {sorted(lines)}")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        r = subprocess.run([tsr, "run", os.path.join(HERE, "kernel_views.tsr"), "--device", device, "--profile", trace],
                           capture_output=True, text=True, env=env, timeout=600)
        print(r.stdout + r.stderr, end="")
        if r.returncode != 0 or "kernel_views ok" not in r.stdout:
            print(f"FAIL: kernel_views.tsr exited {r.returncode}")
            return 1
        with open(trace) as f:
            t = json.load(f)
    events = t["traceEvents"] if isinstance(t, dict) else t
    launches = [e for e in events if e.get("cat") == "launch"]
    copies = collections.Counter()
    calls = collections.Counter()
    for e in launches:
        at = e.get("args", {}).get("at", "")
        m = re.search(r"nn\.tsr:(\d+):", at)
        line = int(m.group(1)) if m else -1
        for k, n in lines.items():
            if line == n and e["name"] == "copy":
                copies[k] += 1
            if e["name"] == "kernels." + k:
                calls[k] += 1
    ok = True
    for k, w in WRITTEN.items():
        if calls[k] == 0:
            print(f"FAIL: no launch of {k} in the trace")
            ok = False
            continue
        per = copies[k] / calls[k]
        print(f"{k}: {calls[k]} launches, {copies[k]} copies at its launch ({per:g} per launch, expected {w})")
        if per != w:
            print(f"FAIL: {k}: {per:g} copies per launch, expected {w} (an operand view or a zero-filled output was copied)")
            ok = False
    print("kernel_views: views read in place" if ok else "kernel_views: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
