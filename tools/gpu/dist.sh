#!/usr/bin/env bash
# Distributed runs on 2 GPUs (docs/distributed.md): tests/dist/test_dist.py's cases with
# `--devices 2 --device cuda` (one rank per GPU, cuda:LOCAL_RANK), printing a PASS or FAIL line per
# check and the count. Builds nothing.
#
#   tools/gpu/dist.sh PATH/TO/tsr [--case collectives|data_parallel|digits|killed|failed|outer|bad]
#
# Needs 2 GPUs the driver sees, python3 with numpy; exit 0 when every check passes.
set -euo pipefail
if [[ $# -lt 1 || ! -x "$1" ]]; then
  echo "usage: tools/gpu/dist.sh PATH/TO/tsr [--case NAME]" >&2
  exit 2
fi
tsr=$(realpath "$1"); shift
root=$(cd "$(dirname "$0")/../.." && pwd)
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [[ "$gpus" -lt 2 ]]; then
  echo "FAIL dist.sh: $gpus GPU(s) visible; 2 are needed" >&2
  exit 1
fi
echo "== $gpus GPUs; $tsr"
python=python3
for p in /usr/bin/python3 python3; do
  if "$p" -c "import numpy" 2>/dev/null; then python=$p; break; fi
done
exec "$python" "$root/tests/dist/test_dist.py" "$tsr" "$root" --device cuda "$@"
