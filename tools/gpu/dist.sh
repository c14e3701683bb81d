#!/usr/bin/env bash
# Distributed runs on 2 GPUs (docs/distributed.md): tests/dist/test_dist.py's cases with
# `--devices 2 --device cuda` (one rank per GPU, cuda:LOCAL_RANK), then
# tests/dist/test_tensor_parallel.py's (Megatron's MLP on 2 GPUs, and on 4 and a dp x tp mesh of
# 2 x 2 where 4 GPUs are visible), and tests/dist/test_dp_overlap.py's checks of data
# parallelism's all-reduces inside the backward graph with --device cuda, printing a PASS or FAIL
# line per check and the counts. Builds nothing.
#
#   tools/gpu/dist.sh PATH/TO/tsr [--case collectives|data_parallel|digits|killed|failed|outer|bad]
#   tools/gpu/dist.sh PATH/TO/tsr --tp [--case mlp|dp_tp|bad]     # the tensor-parallel cases only
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
tp=(--device cuda --max-devices "$gpus")
if [[ "${1:-}" == "--tp" ]]; then
  shift
  exec "$python" "$root/tests/dist/test_tensor_parallel.py" "$tsr" "$root" "${tp[@]}" "$@"
fi
rc=0
"$python" "$root/tests/dist/test_dist.py" "$tsr" "$root" --device cuda "$@" || rc=$?
if [[ $# -eq 0 ]]; then
  echo "== data parallelism's all-reduces in the backward graph (NCCL)"
  "$python" "$root/tests/dist/test_dp_overlap.py" "$tsr" - - --gpu || rc=$?
  echo "== tensor parallelism"
  "$python" "$root/tests/dist/test_tensor_parallel.py" "$tsr" "$root" "${tp[@]}" || rc=$?
fi
exit $rc
