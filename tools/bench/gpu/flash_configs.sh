#!/usr/bin/env bash
# The attention forward (stdlib/kernels.tsr's flash_attention_fwd through nn.flash_attention) at
# each configuration of its autotune space that the Hopper attention loop takes, in one run: the
# stdlib is copied with the kernel's space cut to one configuration (TESSERA_STDLIB points the
# compiler at the copy), and tools/bench/gpu/attention.tsr times the forward, causal and not, at
# the benchmark's shapes. Prints TFLOP/s per configuration and case (4*b*h*s*s*d, half of it
# causal), to choose the order of the space (the first configuration is the one taken until
# kernels are autotuned on the device).
#   tools/bench/gpu/flash_configs.sh TSR [REPS ROUNDS]
set -uo pipefail
cd "$(dirname "$0")/../../.."
TSR=$1
reps=${2:-5}; rounds=${3:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '%-16s %-16s %12s %12s\n' config case "TFLOP/s" causal
for cfg in "64 64 4" "64 128 4" "128 64 8" "128 128 8" "128 176 8"; do
  read -r bm bn w <<<"$cfg"
  dir="$work/bm${bm}_bn${bn}"
  cp -r stdlib "$dir"
  # The space line of flash_attention_fwd (the first @kernel.autotune before it) cut to one entry.
  python3 - "$dir/kernels.tsr" "$bm" "$bn" "$w" <<'PY' || { echo "cannot rewrite the space"; exit 1; }
import re, sys
p, bm, bn, w = sys.argv[1:]
s = open(p).read()
i = s.index("def flash_attention_fwd(")
j = s.rindex("@kernel.autotune(space=dict(", 0, i)
k = s.index(")", s.index("stages=", j))
s = s[:j] + f"@kernel.autotune(space=dict(BM=[{bm}], BN=[{bn}], warps=[{w}], stages=[2])" + s[k + 1:]
open(p, "w").write(s)
PY
  for sd in "4096 64" "4096 128" "256 72"; do
    read -r s d <<<"$sd"
    b=4; h=16; [[ $s == 256 ]] && b=32
    out=$(TESSERA_STDLIB="$dir" "$TSR" run tools/bench/gpu/attention.tsr --device cuda --reps "$reps" --rounds "$rounds" \
          --b $b --h $h --s "$s" --d "$d" --bwd 0 --graph 0 2>&1) || { echo "BM=$bm BN=$bn d$d: failed: $(echo "$out" | tail -2 | tr '\n' ' ')"; continue; }
    echo "$out" >"$work/out.txt"
    python3 - "$work/out.txt" "$bm/$bn/$w" "$b" "$h" "$s" "$d" <<'PY'
import sys
cfg, b, h, s, d = sys.argv[2], *map(int, sys.argv[3:])
t = {l.split()[0]: float(l.split()[1]) for l in open(sys.argv[1]) if len(l.split()) >= 2}
f = 4 * b * h * s * s * d
tag = f"d{d}_s{s}"
print(f"{cfg:<16} {tag:<16} {f / t['fwd_' + tag] / 1e12:12.1f} {f / 2 / t['fwd_causal_' + tag] / 1e12:12.1f}")
PY
  done
done
