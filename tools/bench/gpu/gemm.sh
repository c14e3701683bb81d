#!/usr/bin/env bash
# bf16 GEMM against cuBLAS (through PyTorch) on the same GPU in one run: TFLOP/s of each case of
# gemm.tsr and gemm.py (square products, and a ViT-B step's four linear layers) and their ratio
# (above 1: Tessera faster).
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
p = {l.split()[0]: [float(v) for v in l.split()[1:5]] for l in open(sys.argv[2]) if len(l.split()) >= 5}
print(f"{'case':<10}{'tessera':>16}{'cublas':>16}  ratio")
for k, (sec, m, n, kk) in p.items():
    if k in t:
        flop = 2 * m * n * kk / 1e12
        print(f"{k:<10}{flop / t[k]:>9.1f} TFLOP/s{flop / sec:>9.1f} TFLOP/s  {sec / t[k]:.3f}")
PY
