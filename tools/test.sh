#!/usr/bin/env bash
# Sets up, builds and runs every test: units, golden diagnostics, the spec's examples, bad input,
# numeric tests against PyTorch, and (unless TSR_SKIP_FUZZ=1) the front-end fuzzer for
# FUZZ_SECONDS under ASan + UBSan. Ends with one line `tessera: N passed, N failed, N skipped`.
#
# A test whose prerequisite is missing (torch, nvim, the CUDA toolkit) is skipped, visibly: ctest
# lists it as skipped and the count says so. With TSR_REQUIRE_PREREQS=1 (.ci/run sets it: there
# tools/setup.sh has installed them all) such a skip is a failure. GPU tests skip on machines
# without an NVIDIA GPU regardless.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step prints the minutes since the start, so that a slow CI run says where its time went.
step() { echo "== $* (at $((SECONDS / 60)) min $((SECONDS % 60)) s)"; }
die() { echo "tools/test.sh: FAILED: $*"; echo "tessera: 0 passed, 1 failed, 0 skipped"; exit 1; }

step "setup"
tools/setup.sh || die "tools/setup.sh could not install the packages above (see its output)"
step "build"
tools/build.sh || die "the build failed (the compiler's errors are above)"

step "ctest"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log="$work/ctest.log"
status=0
# Tests run in parallel, one per core: serially they take twice as long on a 2-core machine.
ctest --test-dir build --output-on-failure -j "${JOBS:-$(nproc)}" 2>&1 | tee "$log" || status=$?
summary=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" || true)
if [[ -z "$summary" ]]; then
  # ctest died before its summary (killed, or a configuration error): nothing can be counted.
  echo "tools/test.sh: FAILED: ctest printed no summary (exit $status); its last lines:"
  tail -n 20 "$log"
  echo "tessera: 0 passed, 1 failed, 0 skipped"
  exit 1
fi
total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$summary")
failed=$(sed -E 's/.* passed, ([0-9]+) tests? failed.*/\1/' <<<"$summary")
# ctest counts a skipped test (SKIP_RETURN_CODE) among the passed ones; it lists each after
# "The following tests did not run:" as `N - name (Skipped)`.
skipped=$(grep -cE '^[[:space:]]+[0-9]+ - .* \(Skipped\)$' "$log" || true)
if [[ $status -ne 0 && $failed -eq 0 ]]; then
  echo "tools/test.sh: ctest exited $status with no failed test counted: counted as one failure"
  failed=1
fi
passed=$((total - failed - skipped))
if [[ $skipped -gt 0 ]]; then
  echo "skipped tests (each printed a SKIP line saying what is missing):"
  grep -E '^[[:space:]]+[0-9]+ - .* \(Skipped\)$' "$log" || true
fi

if [[ "${TSR_SKIP_FUZZ:-0}" == "1" ]]; then
  echo "fuzz: skipped (TSR_SKIP_FUZZ=1)"
  skipped=$((skipped + 1))
else
  step "fuzz"
  if tools/fuzz.sh "${FUZZ_SECONDS:-60}"; then
    passed=$((passed + 1))
  else
    echo "tools/test.sh: the fuzz step failed (tools/fuzz.sh's output above says why)"
    failed=$((failed + 1))
  fi
fi
step "done"
echo "tessera: $passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]
