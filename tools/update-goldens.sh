#!/usr/bin/env bash
# Rewrites the golden files that are whole outputs of tsrc (tests/schedule/*.schedule, from
# `tsrc FILE --emit=schedule`) from the current build. The only way goldens change: no test run
# rewrites them. Review the diff (`git diff tests/`) before committing it.
# (The golden suite, tests/golden, keeps its expectations inside each .tsr file: edit those.)
set -euo pipefail
cd "$(dirname "$0")/.."
TSRC=${TSRC:-build/tools/tsrc/tsrc}
[[ -x "$TSRC" ]] || { echo "update-goldens: $TSRC not found: build first (tools/build.sh)"; exit 1; }
for src in tests/schedule/*.tsr; do
  out="${src%.tsr}.schedule"
  tmp=$(mktemp)
  if ! "$TSRC" "$src" --emit=schedule >"$tmp"; then
    rm -f "$tmp"
    echo "update-goldens: tsrc --emit=schedule failed on $src"
    exit 1
  fi
  if cmp -s "$tmp" "$out"; then rm -f "$tmp"; echo "unchanged $out"; else mv "$tmp" "$out"; echo "rewrote   $out"; fi
done
