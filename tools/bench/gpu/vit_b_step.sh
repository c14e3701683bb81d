#!/usr/bin/env bash
# A ViT-B/16 training step (batch 256, 197 tokens, bf16, AdamW) against PyTorch eager and
# torch.compile on the same GPU in one run (issue 10's end-to-end benchmark): time per step (best
# of STEPS) and peak device memory (Tessera: the most `nvidia-smi` saw in use during its run, the
# caching allocator's reserve included; PyTorch: max_memory_reserved, likewise).
#   tools/bench/gpu/vit_b_step.sh TSR [BATCH TOKENS STEPS]
set -uo pipefail
cd "$(dirname "$0")/../../.."
TSR=$1
batch=${2:-256}; tokens=${3:-197}; steps=${4:-5}
t=$(mktemp); m=$(mktemp)
trap 'rm -f "$t" "$m"' EXIT
base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -n 1)
"$TSR" run tools/bench/gpu/vit_b_step.tsr --device cuda --batch "$batch" --tokens "$tokens" --steps "$steps" >"$t" 2>&1 &
pid=$!
peak=0
while kill -0 "$pid" 2>/dev/null; do
  u=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -n 1)
  (( u > peak )) && peak=$u
  sleep 0.2
done
wait "$pid" || echo "tessera failed: $(tail -3 "$t" | tr '\n' ' ')"
cat "$t"
echo "peak_MiB_tessera $((peak - base))"
python3 tools/bench/gpu/vit_b_step.py "$batch" "$tokens" "$steps" | tee "$m"
python3 - "$t" "$m" <<'PY'
import sys
v = {}
for f in sys.argv[1:]:
    for l in open(f):
        p = l.split()
        if len(p) >= 2 and p[0].startswith("step"):
            v[p[0]] = float(p[1])
if "step" in v:
    for k in ("step_eager", "step_compiled"):
        if k in v:
            print(f"tessera {v['step'] * 1e3:.1f} ms, {k[5:]} {v[k] * 1e3:.1f} ms: ratio (tessera speed / pytorch's) {v[k] / v['step']:.3f}")
PY
