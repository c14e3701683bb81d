#!/usr/bin/env bash
# The SigLIP-So400m-style encoder, forward and backward (issue 13, part 2): examples/siglip/siglip.tsr
# beside the same model in PyTorch eager and torch.compile (tools/bench/gpu/siglip.py) in one run on
# one device: mean forward ms, backward ms (Tessera: value_and_grad's time less the forward's;
# PyTorch: loss.backward()) and peak device memory (Tessera: the most `nvidia-smi` saw in use during
# its run above what was in use before, the caching allocator's reserve included; PyTorch:
# max_memory_allocated over its timed steps), then each against eager. The goal (issue 13): better
# than the hand-tuned Triton version's 1.65x forward and 1.59x less memory than eager, with backward
# no slower.
#   tools/bench/gpu/siglip.sh TSR [BATCH [STEPS]]
# Environment: DEVICE (cuda, the default, or cpu), WIDTH DEPTH HEADS MLP GRID PATCH (So400m's:
# 1152 27 16 4304 16 14), RAGGED (1: images of 8..16 x 8..16 patches padded to 256; 0: all full),
# DTYPE (bf16). BATCH defaults to 128: 1024 x 256 patches does not fit one GPU (PyTorch eager's
# peak at 128 was 32.5 GiB on an H200, shared/bench/README.md). On the CPU at a tiny size:
#   DEVICE=cpu WIDTH=64 DEPTH=2 HEADS=2 MLP=96 GRID=4 PATCH=2 tools/bench/gpu/siglip.sh build/tools/tsr/tsr 4 2
set -uo pipefail
cd "$(dirname "$0")/../../.."
TSR=$1
batch=${2:-128}; steps=${3:-10}
device=${DEVICE:-cuda}
width=${WIDTH:-1152}; depth=${DEPTH:-27}; heads=${HEADS:-16}; mlp=${MLP:-4304}
grid=${GRID:-16}; patch=${PATCH:-14}; ragged=${RAGGED:-1}; dtype=${DTYPE:-bf16}
PY=${TSR_TORCH_PYTHON:-python3}
t=$(mktemp); m=$(mktemp)
trap 'rm -f "$t" "$m"' EXIT
model=(--width "$width" --depth "$depth" --heads "$heads" --mlp "$mlp" --batch "$batch" --grid "$grid" --patch "$patch")
rag=$([ "$ragged" = 1 ] && echo true || echo false)

gpu_mem() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -n 1; }
base=0; peak=0
[ "$device" = cuda ] && base=$(gpu_mem)
"$TSR" run examples/siglip/siglip.tsr --device "$device" "${model[@]}" --dtype "$dtype" --ragged "$rag" --steps "$steps" >"$t" 2>&1 &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  if [ "$device" = cuda ]; then
    u=$(gpu_mem)
    (( u > peak )) && peak=$u
  fi
  sleep 0.2
done
wait "$pid" || echo "tessera failed: $(tail -3 "$t" | tr '\n' ' ')"
cat "$t"
if [ "$device" = cuda ]; then echo "peak_MiB_tessera $((peak - base))"; else echo "peak_MiB_tessera n/a"; fi >>"$t"
tail -n 1 "$t"
"$PY" tools/bench/gpu/siglip.py "${model[@]}" --dtype "$dtype" --ragged "$ragged" --steps "$steps" --device "$device" | tee "$m"
"$PY" - "$t" "$m" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) == 2 and p[0] in ("forward_ms", "backward_ms", "peak_MiB_tessera"):
        rows.setdefault("tessera", {})[p[0].replace("_tessera", "")] = p[1]
for line in open(sys.argv[2]):
    p = line.split()
    if len(p) == 7 and p[1] == "forward_ms":
        rows[p[0]] = {"forward_ms": p[2], "backward_ms": p[4], "peak_MiB": p[6]}
def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None
eager = rows.get("eager", {})
print(f"{'':10} {'forward ms':>11} {'backward ms':>12} {'peak MiB':>9}   vs eager: forward x, backward x, memory /")
for name in ("tessera", "eager", "compile"):
    r = rows.get(name)
    if not r:
        continue
    vs = []
    for k in ("forward_ms", "backward_ms", "peak_MiB"):
        a, e = num(r.get(k)), num(eager.get(k))
        vs.append(f"{e / a:.2f}" if a and e else "-")
    print(f"{name:10} {r.get('forward_ms', '-'):>11} {r.get('backward_ms', '-'):>12} {r.get('peak_MiB', '-'):>9}   {', '.join(vs)}")
print("goal (issue 13): tessera above 1.65x forward and 1.59 memory, and at least 1.00x backward")
PY
