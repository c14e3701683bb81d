#!/usr/bin/env bash
# Sets up, builds and runs every test: units, golden diagnostics, the spec's examples, bad input,
# and (unless TSR_SKIP_FUZZ=1) the front-end fuzzer for FUZZ_SECONDS under ASan + UBSan.
# Ends with one line `tessera: N passed, N failed[, N skipped]`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh
echo "== ctest"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
ctest --test-dir build --output-on-failure 2>&1 | tee "$log" || status=$?
total=$(sed -n 's/.*tests passed, \([0-9]*\) tests\? failed out of \([0-9]*\).*/\2/p' "$log" | tail -n 1)
failed=$(sed -n 's/.*tests passed, \([0-9]*\) tests\? failed out of \([0-9]*\).*/\1/p' "$log" | tail -n 1)
total=${total:-0}
failed=${failed:-0}
if [[ $status -ne 0 && $failed -eq 0 ]]; then failed=1; fi
passed=$((total - failed))
skipped=0
if [[ "${TSR_SKIP_FUZZ:-0}" == "1" ]]; then
  echo "fuzz: skipped (TSR_SKIP_FUZZ=1)"
  skipped=1
elif tools/fuzz.sh "${FUZZ_SECONDS:-60}"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
fi
if [[ $skipped -gt 0 ]]; then
  echo "tessera: $passed passed, $failed failed, $skipped skipped"
else
  echo "tessera: $passed passed, $failed failed"
fi
[[ $failed -eq 0 ]]
