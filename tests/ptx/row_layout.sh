#!/usr/bin/env bash
# row_layout_ptx: short rows share a row program, a warp per row. tests/ptx/row_layout.tsr's
# layer_norm over rows of 768 bf16 lowers for sm_90 to one row step whose tile holds 4 rows
# (ir/schedule/LowerGroups.cpp: 32 elements per thread of 4 warps), and RegisterPlan gives each row
# one warp of 3 vectors a thread (the row group with no idle register slot), so its mean and
# variance are warp shuffles only: no bar.sync and no dynamic shared memory, and ptxas assembles
# it without spills. With NEGATE=1 the row tiles hold 8 elements per thread (TSR_ROW_TILE_ELEMS=8:
# a program per row, 128 threads across warps) and the checks must fail: the control that they can.
# Usage: row_layout.sh TSRC PTXAS SOURCE_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
ptx_setup row_layout_ptx "$@"
elems=32; [[ "${NEGATE:-0}" == 1 ]] && elems=8
TSR_ROW_TILE_ELEMS=$elems "$tsrc" --emit=ptx --arch sm_90 "$src/tests/ptx/row_layout.tsr" >"$work/k.ptx" 2>"$work/err" ||
  { echo "FAIL: tsrc: $(head -3 "$work/err")"; exit 1; }
"$ptxas" -v -arch=sm_90a "$work/k.ptx" -o "$work/k.cubin" 2>"$work/ptxas.txt" || { echo "FAIL: ptxas: $(head -5 "$work/ptxas.txt")"; exit 1; }
header=$(grep -m1 '^// kernel .*(row)' "$work/k.ptx")
[[ -n "$header" ]] || { echo "FAIL: no row step's kernel"; exit 1; }
echo "$header"
k=$(sed 's|^// kernel \([^:]*\):.*|\1|' <<<"$header")
ptx_body "$k" "$work/k.ptx" >"$work/body.ptx"
fail=0
grep -q 'tiles BR=4 N=768' <<<"$header" || { echo "FAIL: the row tile is not 4 rows of 768"; fail=1; }
grep -q ', 0 bytes of dynamic shared memory' <<<"$header" || { echo "FAIL: dynamic shared memory (a reduction across warps)"; fail=1; }
bars=$(grep -c 'bar\.sync' "$work/body.ptx")
shfl=$(grep -c 'shfl\.sync' "$work/body.ptx")
echo "bar.sync: $bars, shfl.sync: $shfl"
[[ $bars -eq 0 ]] || { echo "FAIL: $bars bar.sync (a row spans several warps)"; fail=1; }
[[ $shfl -gt 0 ]] || { echo "FAIL: no warp shuffles (the reductions are not in registers)"; fail=1; }
ptx_no_spills "$k" "$work/ptxas.txt" || fail=1
[[ $fail -eq 0 ]] && echo "row_layout_ptx: ok"
exit $fail
