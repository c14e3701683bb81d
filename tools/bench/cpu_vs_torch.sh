#!/usr/bin/env bash
# The CPU benchmarks against PyTorch in one command (issue 11, item 4), for any machine with a
# Python that has torch (the GPU host's 16 cores included: Tessera runs on the CPU here whatever
# GPU is present):
#   tools/bench/cpu_vs_torch.sh TSR [OUT_DIR]
# 1. cpu_ops.py: GEMM f32 1024^3 and 4096^3, layer_norm, rms_norm, softmax [4096, 1024] f32 (row
#    steps and multi-step plans), the main job's training step; PyTorch with as many threads as
#    the machine has cores; the table says which BLAS the torch links.
# 2. digits_vit_race.py: time to 95% test accuracy, Tessera cold and warm against PyTorch, PyTorch
#    with as many threads as cores (Tessera's launches use every core).
# 3. the same race pinned to two cores (taskset -c 0-1) with PyTorch's 2 threads: the issue's
#    comparison at equal cores.
# Each prints a Markdown table; OUT_DIR (default out/bench) keeps them as .md files.
set -euo pipefail
cd "$(dirname "$0")/../.."
TSR=${1:?usage: tools/bench/cpu_vs_torch.sh TSR [OUT_DIR]}
OUT=${2:-out/bench}
mkdir -p "$OUT"
export TSR_DEVICE=cpu
cores=$(nproc)  # the cores this process may run on
echo "== cpu_ops ($cores cores)"
python3 tools/bench/cpu_ops.py "$TSR" --reps 20 --rounds 5 | tee "$OUT/cpu_ops.md"
echo "== digits_vit_race, $cores threads"
python3 tools/bench/digits_vit_race.py "$TSR" --threads "$cores" --rounds 2 | tee "$OUT/digits_vit_race.md"
if command -v taskset >/dev/null && ((cores > 2)); then
  echo "== digits_vit_race, pinned to 2 cores"
  taskset -c 0-1 python3 tools/bench/digits_vit_race.py "$TSR" --threads 2 --rounds 2 | tee "$OUT/digits_vit_race_2cores.md"
fi
