#!/usr/bin/env bash
# Front-end speed (issue: a 5,000-line module checks in under 1 s on the 2-core build machine).
# Prints the median of 5 runs of `tsrc --check` on a generated module, and the same for
# `--emit=ast` (parse only). Not a test: numbers on shared machines are noisy.
set -euo pipefail
cd "$(dirname "$0")/../.."
TSRC=${TSRC:-build/tools/tsrc/tsrc}
LINES=${1:-5000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 tools/bench/gen_module.py "$LINES" > "$tmp/big.tsr"
echo "module: $(wc -l < "$tmp/big.tsr") lines"
"$TSRC" "$tmp/big.tsr" --check   # must check clean
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for mode in "--check" "--emit=ast"; do
  for _ in 1 2 3 4 5; do
    s=$(date +%s.%N); "$TSRC" "$tmp/big.tsr" $mode > /dev/null; e=$(date +%s.%N)
    echo "$e - $s" | bc
  done | median | xargs printf "tsrc $mode: median %.3f s\n"
done
