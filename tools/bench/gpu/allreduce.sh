#!/usr/bin/env bash
# All-reduce bus bandwidth on N GPUs (default 2), 1 MiB to 1 GiB, Tessera beside PyTorch's
# torch.distributed.all_reduce on NCCL in the same run (allreduce.py; docs/distributed.md):
#   tools/bench/gpu/allreduce.sh PATH/TO/tsr [--gpus N] [--max_mib 1024] [--reps 20]
# Builds nothing; needs python3 with torch (CUDA) on a machine with N GPUs.
set -euo pipefail
if [[ $# -lt 1 || ! -x "$1" ]]; then
  echo "usage: tools/bench/gpu/allreduce.sh PATH/TO/tsr [--gpus N] [--max_mib M] [--reps R]" >&2
  exit 2
fi
tsr=$(realpath "$1"); shift
exec python3 "$(dirname "$0")/allreduce.py" "$tsr" "$@"
