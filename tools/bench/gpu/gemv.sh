#!/usr/bin/env bash
# Issue 20's GEMV programs (ir/schedule/LowerGemv.h) on a GPU, off against on (TSR_GEMV=0 / 1),
# in one run on one device:
# 1. the GEMV programs against the reference evaluator on this GPU (tests/schedule/gemv_check.py
#    --device cuda: ragged sizes, f32/bf16/f16/f64, both layouts); prints "N passed, 0 failed";
# 2. the decode's four products (gemv.tsr: a row of 384 through GPT's linears, f32): us per call
#    (host-bound: each call launches its kernels), then each product's kernel time alone
#    (gemv_each.tsr under --profile, trace_summary.py --at its line: "NN us per launch");
# 3. the 6-layer GPT decoding at batch 1 and 64 (examples/gpt/generate.tsr, 256 tokens), without
#    and with CUDA graphs, from a checkpoint trained for STEPS steps (the rate does not depend on
#    the weights), and the kernels of batch-1 decoding's cached step from a --profile trace.
# Batch 64's products have 64 rows: no GEMV, the control that nothing else moved.
#   tools/bench/gpu/gemv.sh TSR [STEPS]
# TSR: the tsr binary (build/tools/tsr/tsr); STEPS: training steps for the checkpoint (default 20);
# DATA: the fortunes folder (default /usr/share/games/fortunes); SCHEDULE_CHECK: the
# schedule_check binary (default build/tests/schedule_check); PY: a Python 3 (default python3).
set -uo pipefail
cd "$(dirname "$0")/../../.."
TSR=$1; steps=${2:-20}
data=${DATA:-/usr/share/games/fortunes}
check=${SCHEDULE_CHECK:-build/tests/schedule_check}
PY=${PY:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== 1. GEMV programs against the evaluator on the GPU"
"$PY" tests/schedule/gemv_check.py "$check" . --device cuda | tail -n 3

echo "== 2. the decode's four products (tools/bench/gpu/gemv.tsr, f32, a row of 384)"
for g in 0 1; do
  echo "TSR_GEMV=$g: $(TSR_GEMV=$g "$TSR" run tools/bench/gpu/gemv.tsr --device cuda 2>&1 | grep gemv_block)"
done
# Each product's kernel time alone (gemv_each.tsr: one product per loop), from a --profile trace:
# "us per launch" of each product, with GEMV off, on, and on at other tiles (TSR_GEMV_TILES=RxC,
# every product: a tile of R rows of w by C along k).
each() { # LABEL, then the environment of the run
  local label=$1 line times=""
  shift
  env "$@" "$TSR" run tools/bench/gpu/gemv_each.tsr --device cuda --reps 50 --profile "$tmp/each.json" >"$tmp/each.txt" 2>&1 ||
    { echo "$label: the profiled run failed: $(tail -2 "$tmp/each.txt" | tr '\n' ' ')"; return; }
  for p in qkv proj fc1 fc2; do
    line=$(grep -n "# $p\$" tools/bench/gpu/gemv_each.tsr | cut -d: -f1)
    times+=" $p $("$PY" tools/bench/trace_summary.py "$tmp/each.json" --at "tools/bench/gpu/gemv_each.tsr:$line" --skip 1 \
      --by-grid --top 1 2>&1 | grep ' matmul ' | sed -n 's/.*grid \([0-9x]*\) *\([0-9.]*\) us per launch.*/\2 us (grid \1)/p'),"
  done
  # The products' sums (equal up to rounding whatever the tiles): a wrong program shows here.
  echo "$label:$times sums $(sed -n 's/^gemv_each //p' "$tmp/each.txt")"
}
each "tiled (TSR_GEMV=0)" TSR_GEMV=0
each "GEMV, default tiles" TSR_GEMV=1
for t in 4x128 8x128 16x128 2x256 4x256 4x384 1x512 2x512 4x512; do each "GEMV, tiles $t" TSR_GEMV=1 TSR_GEMV_TILES=$t; done

echo "== 3. the 6-layer GPT decoding (checkpoint from $steps training steps)"
"$TSR" run examples/gpt/train.tsr --data "$data" --steps "$steps" --eval_interval "$steps" --eval_batches 1 \
  --out "$tmp/curve.svg" --checkpoint "$tmp/gpt.safetensors" >"$tmp/train.txt" 2>&1 ||
  { echo "training failed: $(tail -3 "$tmp/train.txt" | tr '\n' ' ')"; exit 1; }
for bs in 1 64; do
  for cg in 0 1; do
    for g in 0 1; do
      TSR_GEMV=$g TSR_CUDA_GRAPHS=$cg "$TSR" run examples/gpt/generate.tsr --checkpoint "$tmp/gpt.safetensors" --length 256 \
        --samples "$bs" >"$tmp/gen-$bs-$cg-$g.txt" 2>&1 || echo "decoding failed: $(tail -3 "$tmp/gen-$bs-$cg-$g.txt" | tr '\n' ' ')"
      echo "batch $bs, TSR_CUDA_GRAPHS=$cg, TSR_GEMV=$g: $(grep -- '^--- .* tokens/s' "$tmp/gen-$bs-$cg-$g.txt")"
    done
  done
done
# The same weights and seed: the texts agree up to where a sum's rounding (GEMV's order against
# the tiled matmul's) first changes a sampled token.
echo "first 60 bytes of batch 1's sample, GEMV off / on:"
for g in 0 1; do grep -v -- '^---' "$tmp/gen-1-0-$g.txt" | head -c 60 | tr '\n' ' '; echo; done
for g in 0 1; do
  TSR_GEMV=$g "$TSR" run examples/gpt/generate.tsr --checkpoint "$tmp/gpt.safetensors" --length 64 \
    --profile "$tmp/dec$g.json" >/dev/null 2>&1 || echo "the profiled decoding with TSR_GEMV=$g failed"
  echo "-- batch-1 decoding's kernels with TSR_GEMV=$g"
  "$PY" tools/bench/trace_summary.py "$tmp/dec$g.json" --by-grid --top 10
done
