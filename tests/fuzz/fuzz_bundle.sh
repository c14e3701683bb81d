#!/usr/bin/env bash
# Builds the bundle reader's fuzzer with clang, AddressSanitizer and UndefinedBehaviorSanitizer
# into build-fuzz/ (as tools/fuzz.sh does the front end's), and runs it for N seconds (default 60)
# over seeds from tests/fuzz/make_bundle_seeds.py: a minimal bundle, and a real one when a tsrc is
# given (TSRC, default build/tools/tsrc/tsrc when it exists). Fails on any crash, hang, leak or
# sanitizer report.
#
#   tests/fuzz/fuzz_bundle.sh [SECONDS] [TSRC]
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_TO_RUN=${1:-60}
TSRC=${2:-build/tools/tsrc/tsrc}
BUILD=build-fuzz
if [[ ! -f "$BUILD/build.ninja" ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTSR_FUZZ=ON -DTSR_BUILD_TESTS=OFF
fi
ninja -C "$BUILD" fuzz_bundle
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
if [[ -x "$TSRC" ]]; then python3 tests/fuzz/make_bundle_seeds.py "$corpus" "$TSRC"; else python3 tests/fuzz/make_bundle_seeds.py "$corpus"; fi
echo "== fuzzing the bundle reader for ${SECONDS_TO_RUN} s (ASan + UBSan)"
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$BUILD/artifacts"
"$BUILD/tests/fuzz/fuzz_bundle" -artifact_prefix="$BUILD/artifacts/bundle-" -max_total_time="$SECONDS_TO_RUN" -timeout=10 \
  -rss_limit_mb=4096 -max_len=1048576 -print_final_stats=1 "$corpus" 2>&1 | tail -n 25
echo "fuzz_bundle: no crash, hang or sanitizer report in ${SECONDS_TO_RUN} s"
