#!/usr/bin/env bash
# ctest stale_outputs: ninja 1.11 keeps an output built from an input that changed while its
# command ran (ninja issue #1497), and tools/stale_outputs.py finds it and has it rebuilt. A
# one-edge project whose "compile" copies in.h to out.o, and whose first run edits in.h after
# reading it and before writing out.o, as a colleague's save in a shared working tree does (issue
# 20's stale exec/GraphReplay.cpp object, compiled against the old exec/StepBackend.h).
#   tests/buildsys/stale_outputs.sh [--control]
# --control: rebuild with ninja alone, not the tool: out.o keeps the old text, the check fails
# (negative_stale_outputs, WILL_FAIL). Exit 77 (skip) where ninja already rebuilds it itself
# (ninja >= 1.12: pull request #1943).
set -uo pipefail
TOOL=$(cd "$(dirname "$0")/../.." && pwd)/tools/stale_outputs.py
control=0
[[ ${1:-} == --control ]] && control=1
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
cd "$D"
echo "old" >in.h
cat >build.ninja <<'NINJA'
rule cc
  command = sh -c 'text=$$(cat in.h); if [ ! -e edited ]; then sleep 0.05; echo new >in.h; touch edited; sleep 0.05; fi; echo "$$text" >$out; echo "$out: in.h" >$out.d'
  depfile = $out.d
  deps = gcc
build out.o: cc in.h
NINJA
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
ninja -d keepdepfile >/dev/null || { echo "FAIL: the first build"; exit 1; }
check "the first build read the old in.h (out.o: $(cat out.o))" '[[ $(cat out.o) == old ]]'
if [[ $(ninja -n | tail -1) != "ninja: no work to do." ]]; then
  echo "SKIP: ninja $(ninja --version) rebuilds out.o itself (it logs the command's start); nothing to find"
  exit 77
fi
echo "ok: ninja $(ninja --version) says no work to do though in.h changed during the build (the race)"
if ((control)); then
  ninja >/dev/null
else
  report=$(python3 "$TOOL" -C .)
  rc=$?
  echo "$report"
  check "the tool exits 1 and names out.o and in.h" '[[ $rc == 1 && $report == *"out.o"*"read in.h before it changed"* ]]'
  python3 "$TOOL" -C . --fix >/dev/null
  check "--fix exits 0" '[[ $? == 0 ]]'
  ninja >/dev/null
  python3 "$TOOL" -C . --quiet
  check "nothing stale after the rebuild" '[[ $? == 0 ]]'
fi
check "out.o holds the current in.h after the rebuild (out.o: $(cat out.o))" '[[ $(cat out.o) == new ]]'
if ((fail)); then echo "0 passed, 1 failed"; exit 1; fi
echo "1 passed, 0 failed"
