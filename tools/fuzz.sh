#!/usr/bin/env bash
# Builds the front-end fuzzer with clang, AddressSanitizer and UndefinedBehaviorSanitizer into
# build-fuzz/, and runs it for N seconds (default 60) over the seed corpus: the spec's examples,
# our examples, the stdlib and the golden tests. Fails on any crash, hang, leak or sanitizer report.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every step that fails says which and why (tools/test.sh's summary alone does not): the command,
# its line and its exit code. The fuzzer's own failure is reported below with its log.
trap 'rc=$?; echo "tools/fuzz.sh: FAILED (exit $rc) at line $LINENO: $BASH_COMMAND"' ERR
SECONDS_TO_RUN=${1:-60}
if ! [[ "$SECONDS_TO_RUN" =~ ^[1-9][0-9]*$ ]]; then
  echo "tools/fuzz.sh: FAILED: the time to fuzz is a positive number of seconds, not \`$SECONDS_TO_RUN\`"
  exit 2
fi
BUILD=build-fuzz
if [[ ! -f "$BUILD/build.ninja" ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTSR_FUZZ=ON -DTSR_BUILD_TESTS=OFF
fi
ninja -C "$BUILD" fuzz_frontend || { echo "tools/fuzz.sh: FAILED: building the fuzzer in $BUILD/ failed (clang's errors are above)"; exit 1; }
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
# The whole log is kept (build-fuzz/fuzz.log); its last lines are printed either way, and a
# failure names its exit code, the log and the artifacts (the input that made it fail).
log="$BUILD/fuzz.log"
status=0
"$BUILD/tests/fuzz/fuzz_frontend" -artifact_prefix="$BUILD/artifacts/" -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=4096 \
  -max_len=4096 -print_final_stats=1 "$corpus" >"$log" 2>&1 || status=$?
tail -n 25 "$log"
if [[ $status -ne 0 ]]; then
  # The tail is the fuzzer's statistics and the bottom of a stack; the cause is at the top: the
  # first report line (an uncaught exception's what(), a sanitizer's ERROR, a runtime error) and
  # the frames under it, where the crash is in our code.
  first=$(grep -n -m1 -E "terminate called|what\(\)|ERROR:|runtime error|deadly signal|timeout|out-of-memory|leak" "$log" | cut -d: -f1 || true)
  if [[ -n "$first" ]]; then
    echo "== the failure's report (full log line $first on):"
    start=$(( first > 3 ? first - 3 : 1 ))
    sed -n "${start},$(( first + 30 ))p" "$log" | cut -c1-240
  fi
  echo "tools/fuzz.sh: FAILED: the fuzzer exited $status (a crash, hang, leak, sanitizer report or bad option: see above);"
  echo "  full log: $log; inputs that failed: $BUILD/artifacts/"
  exit 1
fi
echo "fuzz: no crash, hang or sanitizer report in ${SECONDS_TO_RUN} s"
