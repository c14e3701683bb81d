#!/usr/bin/env bash
# The ONNX conformance runner: every model of ONNX's backend test data (Debian's libonnx-testdata,
# DATA_DIR = /usr/share/libonnx-testdata/data) imported as `onnx.load` does and run on the
# reference evaluator on each of its test_data_set_* (tsr-onnx-test: ONNX's backend tolerances,
# rtol 1e-3 and atol 1e-7, exact for integers and booleans).
#
#   backend_test.sh DATA_DIR [--tool PATH] [--passing FILE] [--update] [--jobs N] [--log FILE]
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
passing="$here/passing.txt"
update=0
jobs=$(nproc)
log=""
while (($#)); do
  case "$1" in
    --tool) tool=$2; shift 2 ;;
    --passing) passing=$2; shift 2 ;;
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
  echo "usage: backend_test.sh DATA_DIR [--tool PATH] [--passing FILE] [--update] [--jobs N] [--log FILE]" >&2
  exit 64
fi
if [[ ! -x "$tool" ]]; then
  echo "backend_test.sh: $tool is not built (ninja -C build tsr-onnx-test)" >&2
  exit 64
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
categories=(node pytorch-converted pytorch-operator simple)
for cat in "${categories[@]}"; do
  [[ -d "$data/$cat" ]] || continue
  # One process per test, so that a crash or a hang is that test's failure alone.
  find "$data/$cat" -mindepth 1 -maxdepth 1 -type d | sort |
    xargs -P "$jobs" -I{} sh -c 'timeout 120 "$0" "$1" 2>/dev/null || [ $? -le 2 ] || echo "FAIL $(basename "$1"): crashed or timed out"' "$tool" {} |
    sed "s|^\([A-Z]*\) |\1 $cat/|" >> "$out"
done
sort -k2,2 -o "$out" "$out"
[[ -n "$log" ]] && cp "$out" "$log"

tp=0; tf=0; tu=0
for cat in "${categories[@]}"; do
  p=$(grep -c "^PASS $cat/" "$out"); f=$(grep -c "^FAIL $cat/" "$out"); u=$(grep -c "^UNSUPPORTED $cat/" "$out")
  echo "$cat: $p passed, $f failed, $u unsupported"
  tp=$((tp + p)); tf=$((tf + f)); tu=$((tu + u))
done
echo "total: $tp passed, $tf failed, $tu unsupported"

now=$(grep "^PASS " "$out" | awk '{print $2}' | sort)
if [[ $update == 1 ]]; then
  {
    echo "# The backend tests that pass (tools/onnx/backend_test.sh --update writes this file): each failing later is a regression."
    echo "$now"
  } > "$passing"
  echo "backend_test.sh: wrote $(echo "$now" | grep -c .) passing tests to $passing"
  exit 0
fi
kept=$(grep -v '^#' "$passing" 2>/dev/null | sort)
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
