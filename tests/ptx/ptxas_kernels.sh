#!/usr/bin/env bash
# ptxas_kernels: every kernel that `tsrc FILE --emit=ptx` compiles — the hand-written kernels that
# FILE launches and the kernel steps of its graph functions' schedules — for sm_80 and sm_90
# (PTX for sm_90a), assembled by the CUDA toolkit's ptxas. FILE: examples/*.tsr, stdlib/**/*.tsr, tests/golden/ok,
# tests/ir/programs and tests/ptx (stdlib_kernels.tsr launches every kernel of stdlib/kernels.tsr,
# which launches none itself; the test checks that each of them is assembled).
#
# Prints, per kernel, ptxas -v's registers and spills and the kernel's dynamic shared memory; per
# file and arch the number of kernels assembled; then the total per arch and the ranges.
# Fails on:
# - a crash of tsrc: killed by a signal, exit 70 (an internal error), an AddressSanitizer or
#   UBSan report, or no answer in 600 s — never counted as "not lowered";
# - a file that does not lower (tsrc exits 1, or prints no kernel) unless tests/ptx/not_lowered.txt
#   lists it (`FILE: reason substring` of tsrc's first error line, or of "no kernel"), and a listed
#   file that lowers or is not among the files: the list must be updated either way;
# - a ptxas error, a `// kernel` header without its .entry, or a graph's kernel above the 48 KiB
#   of dynamic shared memory its tiles are chosen for (ir/schedule/LowerGroups.h; 200 KiB for a
#   matrix product on the tensor cores, whose PTX has mma.sync or wgmma, 160 KiB for a row step's
#   program, kRowSharedBytes, which keeps a block of whole rows);
# - no sm_90 kernel that multiplies with wgmma (the Hopper path not taken), or an sm_80 one that does;
# - fewer than MIN_KERNELS kernels assembled in all (both archs), so that it cannot pass vacuously.
# Without ptxas it exits 77 (ctest's SKIP_RETURN_CODE), or 1 when TSR_REQUIRE_PREREQS=1 (CI).
# Usage: ptxas_kernels.sh TSRC PTXAS SOURCE_DIR MIN_KERNELS
set -uo pipefail
if [[ $# -ne 4 ]]; then
  echo "usage: ptxas_kernels.sh TSRC PTXAS SOURCE_DIR MIN_KERNELS" >&2
  exit 2
fi
tsrc=$1 ptxas=$2 src=$3 min=$4
if [[ -z "$ptxas" || "$ptxas" == *NOTFOUND* || ! -x "$ptxas" ]]; then
  if [[ "${TSR_REQUIRE_PREREQS:-}" == 1 ]]; then
    echo "FAIL ptxas_kernels: the CUDA toolkit's ptxas was not found (TSR_REQUIRE_PREREQS=1: it must be installed here)"
    exit 1
  fi
  echo "SKIP ptxas_kernels: the CUDA toolkit's ptxas was not found"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/ptxas_kernels.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
list="$src/tests/ptx/not_lowered.txt"
graphShared=49152  # TileTarget::gpu's default budget
matmulShared=204800  # a bf16/f16 matrix product's (kMatMulSharedBytes, ir/schedule/LowerGroups.cpp)
rowShared=163840  # a row step's (kRowSharedBytes, ir/schedule/LowerGroups.h)
# The most dynamic shared memory a CTA may opt into: 163 KiB on sm_80, 227 KiB on sm_90 (CUDA C++
# Programming Guide, compute capabilities table). Hand-written kernels above it are noted.
declare -A sharedMax=([sm_80]=166912 [sm_90]=232448)

# The expectations: FILE -> reason substring (tests/testlib.py's Expectations, in bash).
declare -A expected=() seen=()
while IFS= read -r line || [[ -n "$line" ]]; do
  line=${line#"${line%%[![:space:]]*}"}
  [[ -z "$line" || "$line" == \#* ]] && continue
  name=${line%%:*} reason=${line#*:}
  reason=${reason#"${reason%%[![:space:]]*}"}
  expected["${name%"${name##*[![:space:]]}"}"]=$reason
done < "$list"

failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# Why a run of tsrc is a crash (printed), or nothing: tests/testlib.py's crash_reason.
crash_reason() {
  local rc=$1 err=$2
  if [[ $rc -eq 124 ]]; then echo "did not finish in 600 s (a hang)"
  elif [[ $rc -gt 128 && $rc -le 192 ]]; then echo "killed by SIG$(kill -l $((rc - 128))) (exit $rc)"
  elif [[ $rc -eq 70 ]]; then echo "an internal error (exit 70)"
  elif grep -qE 'ERROR: (Address|Leak|Memory|Thread)Sanitizer|runtime error: |SUMMARY: UndefinedBehaviorSanitizer' "$err"; then
    echo "a sanitizer report"
  fi
}

# The first line of `err` that says error, else its first line.
first_error() {
  local e
  e=$(grep -m1 error "$1") || e=$(sed -n 1p "$1")
  echo "${e:-(no message)}"
}

files=()
for f in "$src"/examples/*.tsr "$src"/stdlib/*.tsr "$src"/stdlib/*/*.tsr "$src"/tests/golden/ok/*.tsr \
         "$src"/tests/ir/programs/*.tsr "$src"/tests/ptx/*.tsr; do
  [[ -f "$f" ]] && files+=("$f")
done

declare -A total=([sm_80]=0 [sm_90]=0)
stats="$work/stats"  # per kernel: registers, spill store bytes, dynamic shared bytes, graph (0/1)
: > "$stats"
for f in "${files[@]}"; do
  rel=${f#"$src"/}
  seen["$rel"]=1
  key=${rel//\//_}
  problem="" counts=""
  for arch in sm_80 sm_90; do
    out="$work/$key.$arch.ptx" err="$work/$key.$arch.err" log="$work/$key.$arch.ptxas"
    timeout -k 10 600 "$tsrc" "$f" --emit=ptx --arch "$arch" >"$out" 2>"$err"
    rc=$?
    crash=$(crash_reason "$rc" "$err")
    if [[ -n "$crash" ]]; then
      problem=crash
      fail "$rel $arch: tsrc --emit=ptx: $crash"
      tail -n 20 "$err"
      break
    fi
    if [[ $rc -ne 0 ]]; then problem=$(first_error "$err"); break; fi
    n=$(grep -c '^\.visible \.entry' "$out") || n=0
    if [[ $n -eq 0 ]]; then problem="no kernel: no kernel launch or graph kernel step lowers"; break; fi
    headers=$(grep -c '^// kernel ' "$out") || headers=0
    if [[ $headers -ne $n ]]; then fail "$rel $arch: $headers '// kernel' headers for $n .entry kernels"; fi
    # sm_90 code is made for sm_90a (Hopper's wgmma; codegen/nvptx/PtxKernel.h, ptxTarget).
    ptxArch=$arch; [[ $arch == sm_90 ]] && ptxArch=sm_90a
    if ! "$ptxas" -v -arch="$ptxArch" "$out" -o "$work/$key.$arch.cubin" >"$log" 2>&1; then
      fail "$rel $arch: ptxas:"
      cat "$log"
      continue
    fi
    total[$arch]=$((total[$arch] + n))
    counts+="${counts:+, }$arch $n kernels"
    # One line per kernel: the headers give the shared memory (and, after "; @", a graph's step),
    # ptxas -v the registers and spills.
    report=$(awk -v file="$rel" -v arch="$arch" -v limit="$graphShared" -v mmLimit="$matmulShared" -v rowLimit="$rowShared" -v archMax="${sharedMax[$arch]}" -v stats="$stats" '
      FNR == NR {
        if ($0 ~ /^\/\/ kernel /) {
          k = $3; sub(/:$/, "", k)
          for (i = 4; i <= NF; i++) if ($i == "bytes") shared[k] = $(i - 1)
          graph[k] = index($0, "; @") > 0
        }
        if ($0 ~ /^\.visible \.entry /) { cur = $3; sub(/\(.*/, "", cur) }
        if (index($0, "mma.sync") || index($0, "wgmma.mma_async")) tc[cur] = 1
        if (index($0, "wgmma.mma_async")) wg[cur] = 1
        next
      }
      /Compiling entry function/ { k = $7; gsub(/\047/, "", k) }
      /bytes spill stores/ { spill[k] = $5 }
      /Used [0-9]+ registers/ {
        regs = $5
        printf "%s %s %s: %s registers, %s bytes spill stores, %s bytes dynamic shared%s%s\n", file, arch, k, regs,
               spill[k], shared[k], graph[k] ? " (graph step)" : "", wg[k] ? " (wgmma)" : (tc[k] ? " (mma.sync)" : "")
        print regs, spill[k], shared[k], graph[k], arch, wg[k] ? 1 : 0 >> stats
        if (!graph[k] && shared[k] > archMax)
          printf "note: %s %s %s: %s bytes of dynamic shared memory, above %s'"'"'s %s: it cannot be launched there\n",
                 file, arch, k, shared[k], arch, archMax
        lim = (k ~ /_matmul$/ && tc[k]) ? mmLimit : (k ~ /_row$/) ? rowLimit : limit
        if (graph[k] && shared[k] > lim)
          printf "FAIL %s %s %s: a graph kernel with %s bytes of dynamic shared memory, above the %s its tiles are chosen for\n",
                 file, arch, k, shared[k], lim
        else if (graph[k] && shared[k] > archMax)
          printf "FAIL %s %s %s: a graph kernel with %s bytes of dynamic shared memory, above the %s a CTA may have on %s\n",
                 file, arch, k, shared[k], archMax, arch
      }' "$out" "$log")
    echo "$report"
    over=$(grep -c '^FAIL' <<<"$report") || over=0
    failures=$((failures + over))
  done
  [[ "$problem" == crash ]] && continue
  if [[ -n "$problem" ]]; then
    want=${expected[$rel]-}
    if [[ -z "${expected[$rel]+x}" ]]; then
      fail "$rel: not lowered: $problem"
      echo "     (not listed in tests/ptx/not_lowered.txt: fix it, or list it there with its reason)"
    elif [[ "$problem" != *"$want"* ]]; then
      fail "$rel: not lowered for another reason than listed in tests/ptx/not_lowered.txt:"
      echo "     got    $problem"
      echo "     listed $want"
    else
      echo "expected $rel: not lowered: $want"
    fi
  elif [[ -n "${expected[$rel]+x}" ]]; then
    fail "$rel: listed in tests/ptx/not_lowered.txt as not lowered (${expected[$rel]}), but it now lowers: remove it from the list"
  else
    echo "ok   $rel: $counts"
  fi
done
for name in "${!expected[@]}"; do
  [[ -n "${seen[$name]+x}" ]] || fail "$name: listed in tests/ptx/not_lowered.txt but not among the files this test ran"
done

# Every kernel of stdlib/kernels.tsr is assembled, through tests/ptx/stdlib_kernels.tsr.
for arch in sm_80 sm_90; do
  ptx="$work/tests_ptx_stdlib_kernels.tsr.$arch.ptx"
  while IFS= read -r k; do
    grep -q "^\.visible \.entry kernels_$k(" "$ptx" 2>/dev/null ||
      fail "stdlib/kernels.tsr $arch: kernel $k is not among tests/ptx/stdlib_kernels.tsr's kernels: launch it there"
  done < <(awk '/^@kernel/ { want = 1; next } want && /^def / { sub(/^def /, ""); sub(/\(.*/, ""); print; want = 0 }' "$src/stdlib/kernels.tsr")
done

all=$((total[sm_80] + total[sm_90]))
if [[ -s "$stats" ]]; then
  awk '{ r[NR] = $1; if ($2 > 0) sp++; if ($4) { g++; if (gmin == "" || $3 < gmin) gmin = $3; if ($3 > gmax) gmax = $3 }
         if (rmin == "" || $1 < rmin) rmin = $1; if ($1 > rmax) rmax = $1; if (smin == "" || $3 < smin) smin = $3; if ($3 > smax) smax = $3 }
       END { printf "ranges: %s-%s registers, %s-%s bytes of dynamic shared memory (graph kernels %s-%s), %d kernels spill\n",
             rmin, rmax, smin, smax, gmin, gmax, sp }' "$stats"
fi
echo "ptxas_kernels: $all kernels assembled (sm_80 ${total[sm_80]}, sm_90 ${total[sm_90]}) from ${#files[@]} files"
# The Hopper matrix path is taken: some sm_90 kernels multiply with wgmma, and no sm_80 kernel does.
wgmma90=$(awk '$5 == "sm_90" && $6 == 1' "$stats" | wc -l)
wgmma80=$(awk '$5 == "sm_80" && $6 == 1' "$stats" | wc -l)
echo "wgmma kernels: sm_90 $wgmma90, sm_80 $wgmma80"
[[ $wgmma90 -ge 1 ]] || fail "ptxas_kernels: no sm_90 kernel multiplies with wgmma (codegen/llvm/MmaPlan.h's Hopper path is not taken)"
[[ $wgmma80 -eq 0 ]] || fail "ptxas_kernels: $wgmma80 sm_80 kernels have wgmma, an sm_90a instruction"
if [[ $all -lt $min ]]; then
  fail "ptxas_kernels: $all kernels assembled, fewer than the $min expected (tests/CMakeLists.txt)"
fi
echo "$failures failures"
[[ $failures -eq 0 ]]
