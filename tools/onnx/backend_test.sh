#!/usr/bin/env bash
# The ONNX conformance runner: every model of ONNX's backend test data (Debian's libonnx-testdata,
# DATA_DIR = /usr/share/libonnx-testdata/data) imported as `onnx.load` does and run on each of its
# test_data_set_* (tsr-onnx-test: ONNX's backend tolerances, rtol 1e-3 and atol 1e-7, exact for
# integers and booleans).
#
#   backend_test.sh DATA_DIR [--executor reference|compiled] [--device cpu|cuda[:N]]
#                   [--match REGEX] [--tool PATH] [--passing FILE] [--update] [--jobs N] [--log FILE]
#
# --executor reference (the default) runs each model on the reference evaluator; compiled runs it
# as `tsr run` does, on the compiled executor of --device (cpu, the default, or a GPU; cuda implies
# compiled). Each executor keeps its own passing list: tools/onnx/passing.txt for the reference
# evaluator, tools/onnx/passing-compiled.txt for the compiled executor, on the CPU and on a GPU alike
# (a test the CPU's programs pass and the GPU's fail is a GPU regression). --match REGEX runs only
# the tests whose CATEGORY/NAME matches (grep -E), and checks only the listed tests it matches
# (--update then refuses: the list is of the whole suite).
#
# Prints one line per category (node, pytorch-converted, pytorch-operator, simple):
#   CATEGORY: N passed, N failed, N unsupported
# then the total in the same form. A test counts as a regression, and the run fails (exit 1),
# only when it is listed in the passing file (tools/onnx/passing.txt) and does not pass now;
# tests that pass and are not listed are reported as new passes (--update rewrites the file).
# --log FILE keeps every test's verdict line (with the reason of each failure).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
data=""
tool="$here/../../build/tools/onnx/tsr-onnx-test"
passing=""
executor=reference
device=cpu
update=0
jobs=$(nproc)
match=""
log=""
while (($#)); do
  case "$1" in
    --tool) tool=$2; shift 2 ;;
    --passing) passing=$2; shift 2 ;;
    --executor) executor=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --match) match=$2; shift 2 ;;
    --update) update=1; shift ;;
    --jobs) jobs=$2; shift 2 ;;
    --log) log=$2; shift 2 ;;
    -*) echo "backend_test.sh: unknown option $1" >&2; exit 64 ;;
    *) data=$1; shift ;;
  esac
done
if [[ -n "$data" && ! -d "$data" ]]; then
  echo "SKIP: ONNX's backend test data is not at $data (Debian's libonnx-testdata; tools/setup.sh installs it)"
  exit 77
fi
if [[ -z "$data" ]]; then
  echo "usage: backend_test.sh DATA_DIR [--executor reference|compiled] [--device cpu|cuda[:N]] [--match REGEX] [--tool PATH] [--passing FILE] [--update] [--jobs N] [--log FILE]" >&2
  exit 64
fi
[[ $device != cpu ]] && executor=compiled
if [[ $executor != reference && $executor != compiled ]]; then
  echo "backend_test.sh: --executor $executor: expected reference or compiled" >&2
  exit 64
fi
if [[ -n "$match" && $update == 1 ]]; then
  echo "backend_test.sh: --update rewrites the list of the whole suite: not with --match" >&2
  exit 64
fi
if [[ -z "$passing" ]]; then
  [[ $executor == reference ]] && passing="$here/passing.txt" || passing="$here/passing-compiled.txt"
fi
if [[ ! -x "$tool" ]]; then
  echo "backend_test.sh: $tool is not built (ninja -C build tsr-onnx-test)" >&2
  exit 64
fi

# A GPU that cannot be used (no driver, no device) stops the run once, not once per test.
if [[ $device != cpu ]]; then
  first=$(find "$data" -mindepth 2 -maxdepth 2 -type d | sort | head -1)
  "$tool" --device "$device" "$first" > /dev/null 2> "${TMPDIR:-/tmp}/tsr-onnx-gpu.$$"
  if [[ $? == 3 ]]; then
    echo "backend_test.sh: --device $device: $(cat "${TMPDIR:-/tmp}/tsr-onnx-gpu.$$")" >&2
    rm -f "${TMPDIR:-/tmp}/tsr-onnx-gpu.$$"
    exit 3
  fi
  rm -f "${TMPDIR:-/tmp}/tsr-onnx-gpu.$$"
fi

out=$(mktemp)
steps=$(mktemp) # the compiled executor's account of each test (tsr-onnx-test's stderr line)
trap 'rm -f "$out" "$steps"' EXIT
categories=(node pytorch-converted pytorch-operator simple)
for cat in "${categories[@]}"; do
  [[ -d "$data/$cat" ]] || continue
  # One process per test, so that a crash or a hang is that test's failure alone.
  find "$data/$cat" -mindepth 1 -maxdepth 1 -type d | sort | while read -r d; do [[ -z "$match" || "$cat/${d##*/}" =~ $match ]] && echo "$d"; done |
    xargs -P "$jobs" -I{} sh -c 'e=$(mktemp); timeout 120 "$0" --executor "$2" --device "$3" "$1" 2>"$e"; rc=$?; grep "^compiled: " "$e" | sed "s|^|$(basename "$1") |" >>"$4"; rm -f "$e"; [ $rc -le 2 ] || echo "FAIL $(basename "$1"): crashed or timed out"' "$tool" {} "$executor" "$device" "$steps" |
    sed "s|^\([A-Z]*\) |\1 $cat/|" >> "$out"
done
sort -k2,2 -o "$out" "$out"
echo "executor: $executor, device: $device"
[[ -n "$log" ]] && cp "$out" "$log"

tp=0; tf=0; tu=0
for cat in "${categories[@]}"; do
  p=$(grep -c "^PASS $cat/" "$out"); f=$(grep -c "^FAIL $cat/" "$out"); u=$(grep -c "^UNSUPPORTED $cat/" "$out")
  echo "$cat: $p passed, $f failed, $u unsupported"
  tp=$((tp + p)); tf=$((tf + f)); tu=$((tu + u))
done
echo "total: $tp passed, $tf failed, $tu unsupported"
if [[ $executor == compiled ]]; then
  # What the compiled executor ran over the suite: programs launched, and the steps compiled, run
  # on the evaluator below the JIT threshold or with unknown dims, and library steps.
  awk '{l += $3; c += $6; i += $8; u += $10; b += $14} END {printf "compiled executor: %d launches; steps: %d compiled, %d interpreted, %d with unknown dims, %d library\n", l, c, i, u, b}' "$steps"
  # The tests whose graphs still have library steps (the evaluator's code on the host, also on a GPU).
  lib=$(awk '$14 > 0 {printf "%s%s (%d)", (n++ ? ", " : ""), $1, $14}' "$steps")
  [[ -n "$lib" ]] && echo "library steps in: $lib"
fi

now=$(grep "^PASS " "$out" | awk '{print $2}' | sort)
if [[ $update == 1 ]]; then
  {
    echo "# The backend tests that pass (tools/onnx/backend_test.sh --update writes this file): each failing later is a regression."
    echo "$now"
  } > "$passing"
  echo "backend_test.sh: wrote $(echo "$now" | grep -c .) passing tests to $passing"
  exit 0
fi
kept=$(grep -v '^#' "$passing" 2>/dev/null | while read -r t; do [[ -z "$match" || "$t" =~ $match ]] && echo "$t"; done | sort)
regressions=$(comm -23 <(echo "$kept" | grep .) <(echo "$now" | grep .))
fresh=$(comm -13 <(echo "$kept" | grep .) <(echo "$now" | grep .))
if [[ -n "$fresh" ]]; then
  echo "new passes (not yet in $(basename "$passing"); --update adds them): $(echo "$fresh" | grep -c .)"
  echo "$fresh" | sed 's/^/  /'
fi
if [[ -n "$regressions" ]]; then
  echo "REGRESSIONS (listed as passing, not passing now): $(echo "$regressions" | grep -c .)"
  for t in $regressions; do grep " $t\(:\|$\)" "$out" | sed 's/^/  /'; done
  exit 1
fi
echo "no regressions ($(echo "$kept" | grep -c .) listed tests pass)"
