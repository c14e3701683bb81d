#!/usr/bin/env bash
# Data-parallel scaling of the ViT-B/16 training step (issue 15's benchmark): dp_scaling.tsr with
# `tsr run --devices N --device cuda` for N = 1, 2 and 4 (those the GPUs visible allow, or the
# GPUS given), the same per-GPU batch for every N; and, where torchrun is found, PyTorch DDP on
# the same model (dp_scaling.py) beside it. Prints per N the step time (best and mean of STEPS),
# images/s (N * batch / mean step) and the scaling efficiency throughput(N) / (N * throughput(1)).
#   tools/bench/gpu/dp_scaling.sh TSR [GPUS...]            (default: 1 2 4, capped at the GPUs seen)
# Environment: BATCH (per GPU, default 64), TOKENS (197), STEPS (10), DDP=0 skips PyTorch.
set -uo pipefail
cd "$(dirname "$0")/../../.."
if [[ $# -lt 1 || ! -x "$1" ]]; then
  echo "usage: tools/bench/gpu/dp_scaling.sh PATH/TO/tsr [GPUS...]" >&2
  exit 2
fi
TSR=$(realpath "$1"); shift
batch=${BATCH:-64}; tokens=${TOKENS:-197}; steps=${STEPS:-10}
seen=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [[ $# -gt 0 ]]; then counts=("$@"); else counts=(1 2 4); fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "== ViT-B/16 training step (bf16, AdamW, $tokens tokens), $batch images per GPU, best/mean of $steps steps; $seen GPU(s) visible"
ran=()
for n in "${counts[@]}"; do
  if (( n > seen )); then echo "skip $n GPUs: only $seen visible"; continue; fi
  ran+=("$n")
  if ! "$TSR" run --devices "$n" tools/bench/gpu/dp_scaling.tsr --device cuda --batch "$batch" --tokens "$tokens" --steps "$steps" \
      >"$out/tsr_$n" 2>&1; then
    echo "tessera failed on $n GPU(s): $(tail -3 "$out/tsr_$n" | tr '\n' ' ')"
  fi
  if [[ "${DDP:-1}" != 0 ]] && command -v torchrun >/dev/null; then
    port=$((29500 + RANDOM % 1000))
    if ! torchrun --standalone --nproc_per_node "$n" --master_port "$port" tools/bench/gpu/dp_scaling.py "$batch" "$tokens" "$steps" \
        >"$out/ddp_$n" 2>&1; then
      echo "pytorch ddp failed on $n GPU(s): $(tail -3 "$out/ddp_$n" | tr '\n' ' ')"
    fi
  fi
done
python3 - "$out" "$batch" "${ran[@]}" <<'PY'
import os, sys
out, batch, ns = sys.argv[1], int(sys.argv[2]), [int(v) for v in sys.argv[3:]]
def read(path, key):
    if not os.path.exists(path):
        return None
    for l in open(path):
        p = l.split()
        if len(p) >= 3 and p[0] == key:
            return float(p[1]), float(p[2])
    return None
rows = {"tessera": {n: read(f"{out}/tsr_{n}", "step") for n in ns}, "pytorch_ddp": {n: read(f"{out}/ddp_{n}", "step_ddp") for n in ns}}
print(f"{'system':<12} {'GPUs':>4} {'best ms':>9} {'mean ms':>9} {'images/s':>10} {'efficiency':>10}")
for name, r in rows.items():
    if not any(r.values()):
        continue
    base = r.get(1)
    for n in ns:
        v = r[n]
        if v is None:
            print(f"{name:<12} {n:>4} {'failed':>9}")
            continue
        ips = n * batch / v[1]
        eff = f"{ips / (n * (batch / base[1])):.3f}" if base else "-"  # throughput(N) / (N * throughput(1))
        print(f"{name:<12} {n:>4} {v[0] * 1e3:>9.1f} {v[1] * 1e3:>9.1f} {ips:>10.1f} {eff:>10}")
t, d = rows["tessera"], rows["pytorch_ddp"]
for n in ns:
    if t.get(n) and d.get(n):
        print(f"{n} GPU(s): tessera images/s / pytorch ddp's {d[n][1] / t[n][1]:.3f}")
PY
