#!/usr/bin/env bash
# bf16 GEMM against cuBLAS (through PyTorch) on the same GPU in one run: TFLOP/s of each case of
# gemm.tsr and gemm.py and their ratio.
#   tools/bench/gpu/gemm.sh TSR [REPS ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
TSR=$1; shift
reps=${1:-10} rounds=${2:-3}
t=$(mktemp); p=$(mktemp)
trap 'rm -f "$t" "$p"' EXIT
"$TSR" run tools/bench/gpu/gemm.tsr --device cuda --reps "$reps" --rounds "$rounds" >"$t"
python3 tools/bench/gpu/gemm.py "$reps" "$rounds" >"$p"
python3 - "$t" "$p" <<'PY'
import sys
t = {l.split()[0]: float(l.split()[1]) for l in open(sys.argv[1]) if len(l.split()) >= 2}
p = {l.split()[0]: float(l.split()[1]) for l in open(sys.argv[2]) if len(l.split()) >= 2}
print(f"{'case':<10}{'tessera':>16}{'cublas':>16}  ratio")
for k in p:
    if k in t:
        n = int(k.split("_")[1])
        flop = 2 * n ** 3 / 1e12
        print(f"{k:<10}{flop / t[k]:>9.1f} TFLOP/s{flop / p[k]:>9.1f} TFLOP/s  {p[k] / t[k]:.3f}")
PY
