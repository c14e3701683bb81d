#!/usr/bin/env bash
# Builds the front-end fuzzer with clang, AddressSanitizer and UndefinedBehaviorSanitizer into
# build-fuzz/, and runs it for N seconds (default 60) over the seed corpus: the spec's examples,
# our examples, the stdlib and the golden tests. Fails on any crash, hang, leak or sanitizer report.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-60}
BUILD=build-fuzz
if [[ ! -f "$BUILD/build.ninja" ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTSR_FUZZ=ON -DTSR_BUILD_TESTS=OFF
fi
ninja -C "$BUILD" fuzz_frontend
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
cp tests/fuzz/corpus/* "$corpus"/ 2>/dev/null || true
for f in examples/*.tsr stdlib/*.tsr stdlib/*/*.tsr ../shared/spec/examples/*.tsr ../shared/spec/examples/errors/*.tsr; do
  [[ -f "$f" ]] && cp "$f" "$corpus/$(echo "$f" | tr '/' '_')"
done
# The golden tests, the first 200 in name order. No `| head` here: under pipefail, head closing
# the pipe early kills find with SIGPIPE, which fails the script (always, on a cold file cache).
mapfile -t golden < <(find tests/golden -name '*.tsr' | sort)
for f in "${golden[@]:0:200}"; do cp "$f" "$corpus/$(echo "$f" | tr '/' '_')"; done
echo "== fuzzing the front end for ${SECONDS_TO_RUN} s (ASan + UBSan)"
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$BUILD/artifacts"
"$BUILD/tests/fuzz/fuzz_frontend" -artifact_prefix="$BUILD/artifacts/" -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=4096 \
  -max_len=4096 -print_final_stats=1 "$corpus" 2>&1 | tail -n 25
echo "fuzz: no crash, hang or sanitizer report in ${SECONDS_TO_RUN} s"
