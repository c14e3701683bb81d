#!/usr/bin/env bash
# flash_overlap_ptx: the attention forward at stages=3 (tests/ptx/flash_overlap.tsr) takes
# FlashAttention-3's overlap on sm_90a (codegen/llvm/FlashPlan.h, FlashPlan::deferred): in its
# PTX the deferred product leaves one wgmma group in flight (wgmma.wait_group 1), each stage has
# an empty mbarrier at which the warps arrive (mbarrier.arrive beside the TMA path's
# arrive.expect_tx), six mbarriers are initialized (three stages, full and empty), and ptxas
# assembles it without spills. With NEGATE=1 the same kernel at stages=2 must fail the checks:
# the control that they can fail.
# Usage: flash_overlap.sh TSRC PTXAS SOURCE_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
ptx_setup flash_overlap_ptx "$@"
file="$src/tests/ptx/flash_overlap.tsr"
if [[ "${NEGATE:-0}" == 1 ]]; then
  sed 's/stages=\[3\]/stages=[2]/' "$file" >"$work/flash_overlap.tsr"
  file="$work/flash_overlap.tsr"
fi
"$tsrc" --emit=ptx --arch sm_90 "$file" >"$work/k.ptx" || { echo "FAIL: tsrc"; exit 1; }
"$ptxas" -arch=sm_90a -v "$work/k.ptx" -o "$work/k.cubin" 2>"$work/ptxas.txt" || { echo "FAIL: ptxas"; cat "$work/ptxas.txt"; exit 1; }
grep -E "registers|spill" "$work/ptxas.txt"
fail=0
grep -q "wgmma.wait_group.sync.aligned 1;" "$work/k.ptx" || { echo "FAIL: no wgmma group left in flight (wait_group 1)"; fail=1; }
grep -q "mbarrier.arrive.shared.b64" "$work/k.ptx" || { echo "FAIL: no arrival at an empty barrier"; fail=1; }
inits=$(grep -c "mbarrier.init" "$work/k.ptx")
(( inits >= 6 )) || { echo "FAIL: $inits mbarrier inits (three stages, full and empty: 6)"; fail=1; }
grep -q " 0 bytes spill stores" "$work/ptxas.txt" || { echo "FAIL: spills"; fail=1; }
[[ $fail == 0 ]] && echo "flash_overlap_ptx ok"
exit $fail
