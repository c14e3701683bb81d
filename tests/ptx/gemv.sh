#!/usr/bin/env bash
# gemv_ptx: the GEMV programs of tests/ptx/gemv.tsr's products of few rows (ir/schedule/LowerGemv.h)
# for sm_90: tsrc --emit=ptx lists them as matmul steps with GEMV tiles (at least 5: the three
# f32 linears, the bf16 one, the n-major product), each kernel keeps its tiles in registers
# (codegen/llvm/RegisterPlan.h: 16-byte ld.global.v4 loads, a k-major sum's shfl.sync, less
# dynamic shared memory than the same products lowered with TSR_REGISTER_TILES=0), and
# ptxas assembles them without spills. With NEGATE=1 the products are lowered with GEMV off
# (TSR_GEMV=0) and the checks must fail: the control that they can.
# Usage: gemv.sh TSRC PTXAS SOURCE_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
ptx_setup gemv_ptx "$@"
on=1; [[ "${NEGATE:-0}" == 1 ]] && on=0
TSR_GEMV=$on "$tsrc" --emit=ptx --arch sm_90 "$src/tests/ptx/gemv.tsr" >"$work/k.ptx" 2>"$work/err" || { echo "FAIL: tsrc: $(head -3 "$work/err")"; exit 1; }
"$ptxas" -v -arch=sm_90a "$work/k.ptx" -o "$work/k.cubin" 2>"$work/ptxas.txt" || { echo "FAIL: ptxas: $(head -5 "$work/ptxas.txt")"; exit 1; }
fail=0
# The kernels whose header names GEMV tiles: `// kernel NAME: ...; @graph step N (matmul), tiles GEMV ...`.
mapfile -t names < <(sed -n 's|^// kernel \([^:]*\): .*tiles GEMV .*|\1|p' "$work/k.ptx")
echo "${#names[@]} GEMV kernels"
[[ ${#names[@]} -ge 5 ]] || { echo "FAIL: fewer than 5 GEMV kernels (matmul steps lowered otherwise)"; fail=1; }
body() { ptx_body "$1" "$work/k.ptx"; }
for k in "${names[@]}"; do
  b=$(body "$k")
  [[ -n "$b" ]] || { echo "FAIL $k: no .entry"; fail=1; continue; }
  grep -q 'ld\.global[.a-z0-9]*\.v4' <<<"$b" || { echo "FAIL $k: no 16-byte vector loads"; fail=1; }
  # A k-major tile's row spans a warp or more: its sums end in shuffles.
  if grep -q "^// kernel $k: .*k-major" "$work/k.ptx"; then
    grep -q 'shfl\.sync' <<<"$b" || { echo "FAIL $k: no warp shuffles (the reduction is not in registers)"; fail=1; }
  fi
  spill=$(ptx_spills "$k" "$work/ptxas.txt")
  regs=$(grep -A6 "Compiling entry function '$k'" "$work/ptxas.txt" | grep -o 'Used [0-9]* registers' | head -1)
  smem=$(grep -A6 "Compiling entry function '$k'" "$work/ptxas.txt" | grep -o '[0-9]* bytes smem' | head -1 | cut -d' ' -f1)
  echo "$k: ${regs:-registers ?}, spill stores ${spill:-?}, static smem ${smem:-0}; $(grep -m1 "^// kernel $k:" "$work/k.ptx" | sed 's/^[^:]*: //')"
  [[ "${spill:-1}" == 0 ]] || { echo "FAIL $k: spills"; fail=1; }
done
# Registers, not shared memory: each GEMV kernel takes less dynamic shared memory than the same
# product lowered with its tiles in shared memory (TSR_REGISTER_TILES=0).
TSR_GEMV=$on TSR_REGISTER_TILES=0 "$tsrc" --emit=ptx --arch sm_90 "$src/tests/ptx/gemv.tsr" >"$work/shared.ptx" 2>/dev/null ||
  { echo "FAIL: tsrc with TSR_REGISTER_TILES=0"; exit 1; }
shared() { sed -n "s|^// kernel $1: [0-9]* threads, \([0-9]*\) bytes of dynamic.*|\1|p" "$2"; }
for k in "${names[@]}"; do
  r=$(shared "$k" "$work/k.ptx") g=$(shared "$k" "$work/shared.ptx")
  echo "$k: $r bytes of dynamic shared memory ($g with the tiles in shared memory)"
  [[ -n "$r" && -n "$g" && $r -lt $g ]] || { echo "FAIL $k: its tiles are not in registers"; fail=1; }
done
[[ $fail == 0 ]] && echo "gemv_ptx ok"
exit $fail
