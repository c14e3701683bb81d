#!/usr/bin/env bash
# gelu_bf16_ptx: GELU's forward over bf16 compiles for sm_90 to a register program whose erf is
# inline (Lowering::erfF32: rcp.approx, no libdevice call, no branch per element) and whose bf16
# rounding makes NaN canonical by masks (set.nan.u32.f32) instead of a select of 0x7FC00000 (the
# select became predicated register writes that ptxas kept live around a persistent product's
# program loop, where they spilled), with 16 elements per thread and no spills. With NEGATE=1 the
# checks read the f32 program, which rounds nothing, compiled at 8 elements per thread
# (TSR_WIDE_TILE_ELEMS=8): the tile, erf-per-element and mask checks must fail. With
# NEGATE=markers the bf16 kernel's PTX gets the two lines the previous code emitted (a call of
# libdevice's __nv_erff, and a selp of 0x7FC00000 = 2143289344 after rounding): the erf-call and
# select checks must fail on them.
# Usage: gelu_bf16.sh TSRC PTXAS SOURCE_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
ptx_setup gelu_bf16_ptx "$@"
negate=${NEGATE:-0}
elems=16; [[ "$negate" == 1 ]] && elems=8
TSR_WIDE_TILE_ELEMS=$elems "$tsrc" --emit=ptx --arch sm_90 "$src/tests/ptx/gelu_bf16.tsr" >"$work/k.ptx" 2>"$work/err" ||
  { echo "FAIL: tsrc: $(head -3 "$work/err")"; exit 1; }
"$ptxas" -v -arch=sm_90a "$work/k.ptx" -o "$work/k.cubin" 2>"$work/ptxas.txt" || { echo "FAIL: ptxas: $(head -5 "$work/ptxas.txt")"; exit 1; }
fn=gelu_bf16; [[ "$negate" == 1 ]] && fn=gelu_f32
header=$(grep -m1 "^// kernel ${fn}_step" "$work/k.ptx")
[[ -n "$header" ]] || { echo "FAIL: no kernel of $fn"; exit 1; }
echo "$header"
k=$(sed 's|^// kernel \([^:]*\):.*|\1|' <<<"$header")
ptx_body "$k" "$work/k.ptx" >"$work/body.ptx"
if [[ "$negate" == markers ]]; then
  printf '\tcall.uni (%%f9), __nv_erff, (%%f8);\n' >>"$work/k.ptx"
  printf '\tselp.b32 %%r9, 2143289344, %%r8, %%p1;\n' >>"$work/body.ptx"
fi
fail=0
grep -q 'tiles BR=2 BC=1024' <<<"$header" || { echo "FAIL: the tile is not 16 elements per thread (BR=2 BC=1024)"; fail=1; }
grep -q '__nv_erf' "$work/k.ptx" && { echo "FAIL: libdevice's erf is called"; fail=1; }
rcp=$(grep -c 'rcp\.approx' "$work/body.ptx")
masks=$(grep -c 'set\.nan\.u32\.f32' "$work/body.ptx")
selects=$(grep -c '2143289344' "$work/body.ptx")
echo "rcp.approx: $rcp, set.nan.u32.f32: $masks, selects of 0x7FC00000: $selects"
[[ $rcp -ge 16 ]] || { echo "FAIL: erf is not inline for each of 16 elements"; fail=1; }
[[ $masks -ge 16 ]] || { echo "FAIL: bf16 rounding's NaN is not made by masks"; fail=1; }
[[ $selects -eq 0 ]] || { echo "FAIL: bf16 rounding selects 0x7FC00000"; fail=1; }
ptx_no_spills "$k" "$work/ptxas.txt" || fail=1
[[ $fail -eq 0 ]] && echo "gelu_bf16_ptx: ok"
exit $fail
