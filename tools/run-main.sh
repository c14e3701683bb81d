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
# Graphs run on the reference evaluator unless TSR_EXECUTOR says otherwise: on this small job it
# finishes first on the 2-core machine, because the compiled executor's compilation of the job's
# graphs costs more than it saves (docs/performance.md, "Main job", has both executors'
# figures). TSR_EXECUTOR=compiled selects the compiled executor.
executor=${TSR_EXECUTOR:-reference}
example=examples/digits_vit.tsr
echo "== tsr run $example --device $device --executor $executor $*"
build/tools/tsr/tsr run "$example" --device "$device" --executor "$executor" "$@"
