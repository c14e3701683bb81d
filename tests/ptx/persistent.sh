#!/usr/bin/env bash
# persistent_ptx: with TSR_PERSISTENT=1, a graph's warp-specialized product (tests/golden/ok/types_mlp.tsr)
# is a persistent kernel for sm_90a: its parameter block holds the program grid (64 bytes more than
# the same kernel's without), it reads %nctaid.x to step over programs, its two roles meet at the
# first program's barrier with the CTA's count (barrier.sync 0, 384) instead of bar.sync, and ptxas
# assembles it. With NEGATE=1 the default build (not persistent) must fail the same checks: the
# control that the checks can fail.
# Usage: persistent.sh TSRC PTXAS SOURCE_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
ptx_setup persistent_ptx "$@"
on=1; [[ "${NEGATE:-0}" == 1 ]] && on=0
TSR_PERSISTENT=$on "$tsrc" --emit=ptx --arch sm_90 "$src/tests/golden/ok/types_mlp.tsr" >"$work/k.ptx" || { echo "FAIL: tsrc"; exit 1; }
TSR_PERSISTENT=0 "$tsrc" --emit=ptx --arch sm_90 "$src/tests/golden/ok/types_mlp.tsr" >"$work/base.ptx" || { echo "FAIL: tsrc"; exit 1; }
"$ptxas" -arch=sm_90a "$work/k.ptx" -o "$work/k.cubin" || { echo "FAIL: ptxas"; exit 1; }
entry=mlp_step0_matmul
size() { grep -A1 "\.entry $entry(" "$1" | sed -n 's/.*param_0\[\([0-9]*\)\].*/\1/p'; }
body() { ptx_body "$entry" "$1"; }
fail=0
s1=$(size "$work/k.ptx") s0=$(size "$work/base.ptx")
echo "parameter block: $s1 bytes (not persistent: $s0)"
[[ -n "$s1" && -n "$s0" && $((s1 - s0)) -eq 64 ]] || { echo "FAIL: the parameter block does not hold the grid"; fail=1; }
body "$work/k.ptx" >"$work/body.ptx"
grep -q "%nctaid.x" "$work/body.ptx" || { echo "FAIL: no loop over programs (%nctaid.x)"; fail=1; }
grep -q "barrier.sync.*0, 384" "$work/body.ptx" || { echo "FAIL: no first-program barrier with the CTA's count"; fail=1; }
grep -q "bar.sync" "$work/body.ptx" && { echo "FAIL: an aligned bar.sync reached from two roles"; fail=1; }
[[ $fail == 0 ]] && echo "persistent_ptx ok"
exit $fail
