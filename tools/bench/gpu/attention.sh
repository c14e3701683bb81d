#!/usr/bin/env bash
# Attention against PyTorch on the same GPU in one run (issue 10's attention benchmarks): bf16
# B4 H16 S4096 at head dims 64 and 128, and the SigLIP shape (head dim 72 at S256, B32 H16),
# causal and not, forward and forward+backward: nn.flash_attention (and the graph-level
# nn.scaled_dot_product_attention forward) against F.scaled_dot_product_attention's fastest fused
# backend. TFLOP/s count 4*b*h*s*s*d for the forward (half of it causal) and 2.5x that for
# forward+backward, as FlashAttention's benchmarks do. Prints a table with each ratio (Tessera
# speed / PyTorch's); a case Tessera cannot run is shown with its error.
#   tools/bench/gpu/attention.sh TSR [REPS ROUNDS]
set -uo pipefail
cd "$(dirname "$0")/../../.."
TSR=$1
reps=${2:-5}; rounds=${3:-3}
t=$(mktemp); p=$(mktemp)
trap 'rm -f "$t" "$p"' EXIT
for cfg in "4 16 4096 64" "4 16 4096 128" "32 16 256 72"; do
  read -r b h s d <<<"$cfg"
  if ! "$TSR" run tools/bench/gpu/attention.tsr --device cuda --reps "$reps" --rounds "$rounds" \
      --b "$b" --h "$h" --s "$s" --d "$d" >>"$t" 2>"$t.err"; then
    echo "tessera d$d s$s failed: $(tail -2 "$t.err" | tr '\n' ' ')"
  fi
  python3 tools/bench/gpu/attention.py "$reps" "$rounds" "$b" "$h" "$s" "$d" >>"$p" || echo "pytorch d$d s$s failed"
done
rm -f "$t.err"
python3 - "$t" "$p" <<'PY'
import re, sys
t = {l.split()[0]: float(l.split()[1]) for l in open(sys.argv[1]) if len(l.split()) >= 2 and not l.startswith("#")}
p, pb = {}, {}
for l in open(sys.argv[2]):
    f = l.split()
    if len(f) >= 3 and not l.startswith("#"):
        p[f[0]], pb[f[0]] = float(f[1]), f[2]
sizes = {"d64_s4096": (4, 16, 4096, 64), "d128_s4096": (4, 16, 4096, 128), "d72_s256": (32, 16, 256, 72)}
print(f"{'case':<26}{'tessera':>16}{'pytorch':>16}  backend    ratio")
for name in sorted(set(t) | set(p)):
    m = re.search(r"(d\d+_s\d+)$", name)
    if not m or m.group(1) not in sizes:
        continue
    b, h, s, d = sizes[m.group(1)]
    flops = 4 * b * h * s * s * d * (0.5 if "causal" in name else 1) * (2.5 if name.startswith("fwdbwd") else 1)
    ts = f"{flops / t[name] / 1e12:>9.1f} TFLOP/s" if name in t else f"{'-':>16}"
    ps = f"{flops / p[name] / 1e12:>9.1f} TFLOP/s" if name in p else f"{'-':>16}"
    ratio = f"{p[name] / t[name]:.3f}" if name in t and name in p else "-"
    print(f"{name:<26}{ts}{ps}  {pb.get(name, '-'):<10} {ratio}")
PY
