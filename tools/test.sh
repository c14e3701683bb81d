#!/usr/bin/env bash
# Sets up, builds and runs every test: units, golden diagnostics, the spec's examples, bad input,
# and (unless TSR_SKIP_FUZZ=1) the front-end fuzzer for FUZZ_SECONDS under ASan + UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh
echo "== ctest"
ctest --test-dir build --output-on-failure
if [[ "${TSR_SKIP_FUZZ:-0}" != "1" ]]; then
  tools/fuzz.sh "${FUZZ_SECONDS:-60}"
fi
