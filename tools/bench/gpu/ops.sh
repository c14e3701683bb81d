#!/usr/bin/env bash
# GPU ops against PyTorch on the same GPU in one run (issue 10's first benchmarks): bf16 GEMM
# 4096^3 (TFLOP/s), layer_norm, rms_norm and softmax over bf16 [32768, 4096] (GB/s: the input read
# once and the output written once), each normalization as Tessera's row step and as its
# multi-step plan (`_steps`, a symbolic row length; PyTorch's figure is the same op's), and the
# tanh-approximated GELU over the same x (elementwise, GB/s as the normalizations'). Prints a
# table with each Tessera/PyTorch speed ratio.
#   tools/bench/gpu/ops.sh TSR [REPS ROUNDS SIZE ROWS COLS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
TSR=$1; shift
args=("${@:-5 3 4096 32768 4096}")
read -r reps rounds size rows cols <<<"${args[*]}"
t=$(mktemp); p=$(mktemp)
trap 'rm -f "$t" "$p"' EXIT
"$TSR" run tools/bench/gpu/ops.tsr --device cuda --reps "$reps" --rounds "$rounds" --size "$size" --rows "$rows" --cols "$cols" >"$t"
python3 tools/bench/gpu/ops.py "$reps" "$rounds" "$size" "$rows" "$cols" >"$p"
python3 - "$t" "$p" "$size" "$rows" "$cols" <<'PY'
import sys
t = {l.split()[0]: float(l.split()[1]) for l in open(sys.argv[1]) if len(l.split()) >= 2}
p = {l.split()[0]: float(l.split()[1]) for l in open(sys.argv[2]) if len(l.split()) >= 2}
size, rows, cols = (int(v) for v in sys.argv[3:6])
work = {"gemm": (2 * size ** 3 / 1e12, "TFLOP/s")}
work["gelu_tanh"] = (2 * rows * cols * 2 / 1e9, "GB/s")
for k in ["layer_norm", "rms_norm", "softmax"]:
    work[k] = work[k + "_steps"] = (2 * rows * cols * 2 / 1e9, "GB/s")
    if k in p:
        p[k + "_steps"] = p[k]
print(f"{'op':<18}{'tessera':>14}{'pytorch':>14}  ratio (tessera speed / pytorch's)")
for k, (amount, unit) in work.items():
    if k in t and k in p:
        print(f"{k:<18}{amount / t[k]:>10.1f} {unit:<4}{amount / p[k]:>9.1f} {unit:<5} {p[k] / t[k]:.3f}")
# The normalizations against torch.compile's kernels and as a fraction of the copy bandwidth.
if "copy" in p:
    copy = work["layer_norm"][0] / p["copy"]
    print(f"copy bandwidth (x.clone()): {copy:.1f} GB/s")
    print(f"{'op':<18}{'tessera':>14}{'compiled':>14}  ratio (tessera / torch.compile)  tessera / copy")
    for k in ["layer_norm", "rms_norm", "softmax"]:
        c = p.get(k + "_compiled")
        if k in t:
            amount = work[k][0]
            comp = f"{amount / c:>9.1f} GB/s  {c / t[k]:.3f}" if c else f"{'-':>9}       -    "
            print(f"{k:<18}{amount / t[k]:>10.1f} GB/s{comp}{'':>20}{amount / t[k] / copy:.3f}")
PY
