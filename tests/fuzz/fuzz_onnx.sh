#!/usr/bin/env bash
# Builds the ONNX importer's fuzzer with clang, AddressSanitizer and UndefinedBehaviorSanitizer
# into build-fuzz/ (as tools/fuzz.sh does the front end's), and runs it for N seconds (default 60)
# over the models of ONNX's backend test data (DATA_DIR, default Debian's libonnx-testdata).
# Fails on any crash, hang, leak or sanitizer report.
#
#   tests/fuzz/fuzz_onnx.sh [SECONDS] [DATA_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_TO_RUN=${1:-60}
DATA=${2:-/usr/share/libonnx-testdata/data}
BUILD=build-fuzz
if [[ ! -f "$BUILD/build.ninja" ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTSR_FUZZ=ON -DTSR_BUILD_TESTS=OFF
fi
ninja -C "$BUILD" fuzz_onnx
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
# Every model under 64 KiB (the large pytorch-converted ones slow the search down).
find "$DATA" -name model.onnx -size -64k -print0 | while IFS= read -r -d '' f; do
  cp "$f" "$corpus/$(echo "${f#"$DATA"/}" | tr '/' '_')"
done
echo "== fuzzing the ONNX importer for ${SECONDS_TO_RUN} s (ASan + UBSan) over $(ls "$corpus" | wc -l) seed models"
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$BUILD/artifacts"
log="$BUILD/fuzz_onnx.log"
status=0
"$BUILD/tests/fuzz/fuzz_onnx" -artifact_prefix="$BUILD/artifacts/onnx-" -max_total_time="$SECONDS_TO_RUN" -timeout=10 \
  -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 "$corpus" >"$log" 2>&1 || status=$?
tail -n 25 "$log"
if [[ $status -ne 0 ]]; then
  echo "fuzz_onnx: FAILED: the fuzzer exited $status; full log: $log; inputs that failed: $BUILD/artifacts/"
  exit 1
fi
echo "fuzz_onnx: no crash, hang or sanitizer report in ${SECONDS_TO_RUN} s"
