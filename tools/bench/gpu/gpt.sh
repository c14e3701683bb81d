#!/usr/bin/env bash
# The character-level GPT (issue 20; examples/gpt/) beside the same model in PyTorch in one run on
# one device: training ms/step in bf16 mixed precision (Tessera: train.tsr --amp true, the mean of
# the last --eval_interval window; PyTorch: gpt_torch.py's eager and torch.compile figures, bf16
# autocast), and decoding tokens/s with the key/value cache at batch 1 and 64 (Tessera:
# generate.tsr, without and with CUDA graphs (TSR_CUDA_GRAPHS=0/1); PyTorch: gpt_torch.py's
# preallocated cache, eager and CUDA graphs), each as a ratio to PyTorch's. Both train on the same
# text: corpus.FILES of DATA, in order.
#   tools/bench/gpu/gpt.sh TSR GPT_TORCH_PY [STEPS]
# GPT_TORCH_PY is the peer script (the repository's benchmarks folder beside the checkout:
# bench/gpt_torch.py). STEPS (default 200) training steps each; DATA: the fortunes folder
# (default /usr/share/games/fortunes); TSR_TORCH_PYTHON: the Python with PyTorch; DECODE_ONLY=1:
# PyTorch decodes only (--decode-only), and Tessera's training only makes the checkpoint.
set -uo pipefail
cd "$(dirname "$0")/../../.."
TSR=$1; PEER=$2; steps=${3:-200}
data=${DATA:-/usr/share/games/fortunes}
PY=${TSR_TORCH_PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
half=$(( steps / 2 > 0 ? steps / 2 : 1 ))

# The corpus as one file, for the peer (train.tsr reads the folder itself).
"$PY" - "$data" "$tmp/corpus.txt" <<'PYEOF' || exit 1
import re, sys
files = re.search(r"FILES = \(([^)]*)\)", open("examples/gpt/corpus.tsr").read()).group(1)
with open(sys.argv[2], "wb") as out:
    for name in re.findall(r'"([^"]+)"', files):
        out.write(open(f"{sys.argv[1]}/{name}", "rb").read())
PYEOF

echo "== tessera train (--amp true, $steps steps)"
"$TSR" run examples/gpt/train.tsr --data "$data" --amp true --steps "$steps" --eval_interval "$half" --eval_batches 2 \
  --out "$tmp/curve.svg" --checkpoint "$tmp/gpt.safetensors" >"$tmp/train.txt" 2>&1 || echo "tessera training failed: $(tail -3 "$tmp/train.txt" | tr '\n' ' ')"
tail -n 4 "$tmp/train.txt"
train_ms=$(grep -o '[0-9.]* ms/step' "$tmp/train.txt" | tail -n 1 | cut -d' ' -f1)
# Decoding twice per batch: kernels launched one by one (TSR_CUDA_GRAPHS=0), and the cached step
# captured as a CUDA graph and replayed (TSR_CUDA_GRAPHS=1, exec/GraphReplay.h; its verbose lines
# say whether cached_step was captured, and what a steady token copies and waits for).
for bs in 1 64; do
  for g in 0 1; do
    TSR_CUDA_GRAPHS=$g TSR_CUDA_GRAPHS_VERBOSE=$g "$TSR" run examples/gpt/generate.tsr --checkpoint "$tmp/gpt.safetensors" --length 256 \
      --samples "$bs" >"$tmp/gen$bs-$g.txt" 2>&1 ||
      echo "tessera decoding at batch $bs (TSR_CUDA_GRAPHS=$g) failed: $(tail -3 "$tmp/gen$bs-$g.txt" | tr '\n' ' ')"
    echo "batch $bs, TSR_CUDA_GRAPHS=$g: $(grep -- '^--- .* tokens/s' "$tmp/gen$bs-$g.txt")"
  done
  grep -h -E 'cuda graphs: (@cached_step|[0-9]+ replays)' "$tmp/gen$bs-1.txt" | head -n 4 || true
  grep -q 'cuda graphs: @cached_step[^ ]* captured' "$tmp/gen$bs-1.txt" || echo "NOTE: cached_step was not captured at batch $bs"
done
# The steady rate (after the first sampled token, which compiles), as PyTorch's second round.
gen1=$(grep -o '[0-9]* tokens/s after' "$tmp/gen1-0.txt" | tr -dc '0-9')
gen64=$(grep -o '[0-9]* tokens/s after' "$tmp/gen64-0.txt" | tr -dc '0-9')
gen1g=$(grep -o '[0-9]* tokens/s after' "$tmp/gen1-1.txt" | tr -dc '0-9')
gen64g=$(grep -o '[0-9]* tokens/s after' "$tmp/gen64-1.txt" | tr -dc '0-9')

echo "== pytorch ($steps iterations)"
"$PY" "$PEER" "$tmp/corpus.txt" --iters "$steps" $([ "${DECODE_ONLY:-0}" = 1 ] && echo --decode-only) | tee "$tmp/torch.txt"

"$PY" - "$tmp/torch.txt" "${train_ms:-nan}" "${gen1:-nan}" "${gen64:-nan}" "${gen1g:-nan}" "${gen64g:-nan}" <<'PYEOF'
import json, sys
peer = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ours = {"train": float(sys.argv[2]), 1: float(sys.argv[3]), 64: float(sys.argv[4])}
graphs = {1: float(sys.argv[5]), 64: float(sys.argv[6])}
def find(prefix):
    return {r["what"]: r.get("value") for r in peer if r["what"].startswith(prefix)}
print("== ratios (time: PyTorch's / Tessera's, so above 1 is Tessera faster)")
for what, v in find("train ms/iter").items():
    print(f"train {what}: PyTorch {v} ms, Tessera {ours['train']} ms, ratio {v / ours['train']:.2f}")
for bs in (1, 64):
    for what, v in find(f"decode tokens/s batch {bs} ").items():
        print(f"{what}: PyTorch {v}, Tessera {ours[bs]:.0f}, ratio {ours[bs] / v:.2f}; "
              f"Tessera with CUDA graphs {graphs[bs]:.0f}, ratio {graphs[bs] / v:.2f}")
PYEOF
