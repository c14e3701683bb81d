#!/usr/bin/env bash
# epilogue_staged_ptx: a graph product's epilogue (tests/ptx/linear.tsr, bias and none) stores its
# tile through shared memory for sm_90a (codegen/llvm/lower/MmaEpilogue.cpp): 16-byte
# vectors read back from shared memory (ld.shared.v4) and stored along the rows
# (st.global.v4), and ptxas assembles it without spills for the product without bias. With
# NEGATE=1 the same checks run on TSR_EPILOGUE_STAGING=0's code, which stores pairs from the
# registers, and must fail.
# Usage: epilogue_staged.sh TSRC PTXAS SOURCE_DIR
set -uo pipefail
source "$(dirname "$0")/lib.sh"
ptx_setup epilogue_staged_ptx "$@"
staging=1; [[ "${NEGATE:-0}" == 1 ]] && staging=0
fail=0
for arch in sm_90; do
  TSR_EPILOGUE_STAGING=$staging "$tsrc" --emit=ptx --arch $arch "$src/tests/ptx/linear.tsr" >"$work/$arch.ptx" || { echo "FAIL: tsrc ($arch)"; exit 1; }
  pa=$arch; [[ $arch == sm_90 ]] && pa=sm_90a
  "$ptxas" -v -arch=$pa "$work/$arch.ptx" -o "$work/$arch.cubin" 2>"$work/$arch.txt" || { cat "$work/$arch.txt"; echo "FAIL: ptxas ($arch)"; exit 1; }
  for k in linear_step1_matmul product_step0_matmul; do
    ptx_body $k "$work/$arch.ptx" >"$work/$k.$arch.ptx"
    [[ -s "$work/$k.$arch.ptx" ]] || { echo "FAIL: no kernel $k ($arch)"; fail=1; continue; }
    v=$(grep -c "st.global.v4" "$work/$k.$arch.ptx") l=$(grep -c "ld.shared.v4" "$work/$k.$arch.ptx")
    echo "$k ($arch): $v st.global.v4, $l ld.shared.v4"
    [[ $v -gt 0 && $l -gt 0 ]] || { echo "FAIL: $k ($arch) does not store its tile through shared memory"; fail=1; }
  done
  ptx_no_spills product_step0_matmul "$work/$arch.txt" "product_step0_matmul ($arch)" || fail=1
done
[[ $fail == 0 ]] && echo "epilogue_staged_ptx ok"
exit $fail
