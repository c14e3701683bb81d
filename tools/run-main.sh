#!/usr/bin/env bash
# The main job: set up, build, and train the Vision Transformer of examples/digits_vit.tsr on the
# digits data set (one line per epoch, the final test accuracy, and the loss/accuracy curves in
# digits_vit_curve.svg). Extra arguments go to the program: tools/run-main.sh --epochs 10.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh
# A GPU is used where the driver sees one ("auto"); otherwise, and on machines without CUDA, the
# CPU runs the job.
device=cpu
if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1; then
  device=auto
fi
# Graphs run on the reference evaluator unless TSR_EXECUTOR says otherwise: the compiled
# executor runs an epoch about three times as fast, but first spends over 2.5 minutes of LLVM
# compilation on this job's graphs on the 2-core machine, so that the whole job takes about
# 3.3 minutes instead of under 2 (docs/performance.md, "Main job"). TSR_EXECUTOR=compiled
# selects it.
executor=${TSR_EXECUTOR:-reference}
example=examples/digits_vit.tsr
echo "== tsr run $example --device $device --executor $executor $*"
build/tools/tsr/tsr run "$example" --device "$device" --executor "$executor" "$@"
