#!/usr/bin/env bash
# ptxas_kernels: every kernel that `tsrc --emit=tile` lowers from examples/*.tsr,
# stdlib/kernels.tsr and tests/ptx/stdlib_kernels.tsr (launches of the stdlib kernels that no
# example lowers yet), compiled to PTX for sm_80 and sm_90 (tsrc --emit=ptx) and assembled by the
# CUDA toolkit's ptxas; prints ptxas -v's registers and shared memory per kernel. Fails on any
# tsrc --emit=ptx or ptxas error (a file that --emit=tile itself rejects, a front-end limit, is
# listed as not lowered); exits 77 (ctest SKIP_RETURN_CODE) when the toolkit is missing.
# Usage: ptxas_kernels.sh TSRC PTXAS SOURCE_DIR WORK_DIR
set -u
tsrc=$1 ptxas=$2 src=$3 work=$4
if [[ -z "$ptxas" || "$ptxas" == *NOTFOUND* || ! -x "$ptxas" ]]; then
  echo "ptxas_kernels: SKIPPED: CUDA toolkit not found"
  exit 77
fi
mkdir -p "$work"
fail=0 kernels=0
for f in "$src"/examples/*.tsr "$src"/stdlib/kernels.tsr "$src"/tests/ptx/stdlib_kernels.tsr; do
  name=$(basename "$f" .tsr)
  if ! "$tsrc" "$f" --emit=tile >/dev/null 2>"$work/$name.tile.err"; then
    echo "$name: not lowered by --emit=tile: $(grep -m1 error "$work/$name.tile.err")"
    continue
  fi
  for arch in sm_80 sm_90; do
    out="$work/$name.$arch.ptx"
    if ! "$tsrc" "$f" --emit=ptx --arch "$arch" >"$out" 2>"$work/$name.$arch.err"; then
      echo "FAIL $name $arch: tsrc --emit=ptx:"; cat "$work/$name.$arch.err"; fail=1; continue
    fi
    n=$(grep -c '^\.visible \.entry' "$out")
    if [[ $n -eq 0 ]]; then echo "$name $arch: no kernels"; continue; fi
    kernels=$((kernels + n))
    if ! "$ptxas" -v -arch="$arch" "$out" -o "$work/$name.$arch.cubin" >"$work/$name.$arch.ptxas" 2>&1; then
      echo "FAIL $name $arch: ptxas:"; cat "$work/$name.$arch.ptxas"; fail=1; continue
    fi
    # ptxas -v: "Compiling entry function 'K' for 'sm_90'" then "Used R registers, ..." per kernel.
    awk -v f="$name" -v a="$arch" '/Compiling entry function/ {k=$7; gsub(/\x27/, "", k)}
         /Used [0-9]+ registers/ {sub(/.*info    : /, ""); printf "%s %s %s: %s\n", f, a, k, $0}' "$work/$name.$arch.ptxas"
    grep -h '^// kernel' "$out" | sed "s|^// kernel|$name $arch: dynamic shared:|" | cut -d';' -f1
  done
done
echo "ptxas_kernels: $kernels kernel compilations checked"
[[ $kernels -gt 0 ]] || { echo "FAIL: no kernels found"; fail=1; }
exit $fail
