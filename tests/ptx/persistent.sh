#!/usr/bin/env bash
# persistent_ptx: with TSR_PERSISTENT=1, a graph's warp-specialized product (tests/golden/ok/types_mlp.tsr)
# is a persistent kernel for sm_90a: its parameter block holds the program grid (64 bytes more than
# the same kernel's without), it reads %nctaid.x to step over programs, its two roles meet at the
# first program's barrier with the CTA's count (barrier.sync 0, 384) instead of bar.sync, and ptxas
# assembles it without spills. With NEGATE=1 the default build (not persistent) must fail the same
# checks: the control that the checks can fail.
# MODE=pingpong (pingpong_ptx): TSR_PERSISTENT=pingpong, whose programs are 64-row tiles of one
# warpgroup (warps = 4 in the tile text) run two at a time: 384 threads per CTA, each consumer
# warpgroup synchronizing on a barrier of its own (barrier.sync with the id in a register, 128
# threads), and a second warpgroup without programs arriving at the first barrier
# (barrier.arrive 0, 384). Its NEGATE=1 compiles with TSR_PERSISTENT=1 and must fail the
# ping-pong checks.
# Usage: persistent.sh TSRC PTXAS SOURCE_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
mode=${MODE:-cooperative}
ptx_setup "persistent_ptx.$mode" "$@"
if [[ $mode == pingpong ]]; then
  on=pingpong; [[ "${NEGATE:-0}" == 1 ]] && on=1
else
  on=1; [[ "${NEGATE:-0}" == 1 ]] && on=0
fi
prog="$src/tests/golden/ok/types_mlp.tsr"
TSR_PERSISTENT=$on "$tsrc" --emit=ptx --arch sm_90 "$prog" >"$work/k.ptx" || { echo "FAIL: tsrc"; exit 1; }
TSR_PERSISTENT=0 "$tsrc" --emit=ptx --arch sm_90 "$prog" >"$work/base.ptx" || { echo "FAIL: tsrc"; exit 1; }
"$ptxas" -v -arch=sm_90a "$work/k.ptx" -o "$work/k.cubin" 2>"$work/ptxas.txt" || { cat "$work/ptxas.txt"; echo "FAIL: ptxas"; exit 1; }
entry=mlp_step0_matmul
size() { grep -A1 "\.entry $entry(" "$1" | sed -n 's/.*param_0\[\([0-9]*\)\].*/\1/p'; }
fail=0
s1=$(size "$work/k.ptx") s0=$(size "$work/base.ptx")
echo "parameter block: $s1 bytes (not persistent: $s0)"
[[ -n "$s1" && -n "$s0" && $((s1 - s0)) -eq 64 ]] || { echo "FAIL: the parameter block does not hold the grid"; fail=1; }
ptx_body "$entry" "$work/k.ptx" >"$work/body.ptx"
grep -q "%nctaid.x" "$work/body.ptx" || { echo "FAIL: no loop over programs (%nctaid.x)"; fail=1; }
grep -q "barrier.sync.*0, 384" "$work/body.ptx" || { echo "FAIL: no first-program barrier with the CTA's count"; fail=1; }
grep -q "bar.sync" "$work/body.ptx" && { echo "FAIL: an aligned bar.sync reached from two roles"; fail=1; }
ptx_no_spills "$entry" "$work/ptxas.txt" || fail=1
if [[ $mode == pingpong ]]; then
  TSR_PERSISTENT=$on "$tsrc" --emit=tile --graph-kernels "$prog" >"$work/k.tile" || { echo "FAIL: tsrc --emit=tile"; exit 1; }
  grep -q "@mlp.step0.matmul(.*config {warps = 4}" "$work/k.tile" || { echo "FAIL: the product's program is not one warpgroup"; fail=1; }
  grep -q "^\.maxntid 384," <(grep -A3 "\.entry $entry(" "$work/k.ptx") || { echo "FAIL: not 384 threads (two consumer warpgroups and the producer)"; fail=1; }
  grep -qE "barrier.sync[[:space:]]+%r[0-9]+, 128;" "$work/body.ptx" || { echo "FAIL: no barrier of one consumer warpgroup's own"; fail=1; }
  grep -q "barrier.arrive 0, 384;" "$work/body.ptx" || { echo "FAIL: a warpgroup without programs does not arrive at the first barrier"; fail=1; }
fi
[[ $fail == 0 ]] && echo "persistent_ptx ($mode) ok"
exit $fail
