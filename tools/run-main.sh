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
# Graphs and kernels run compiled (the default of `tsr run`: a step runs interpreted until its
# work pays for its compilation, then as machine code); TSR_EXECUTOR=reference selects the
# reference evaluator instead (docs/performance.md, "Main job", has both executors' figures).
executor=${TSR_EXECUTOR:-compiled}
example=examples/digits_vit.tsr
echo "== tsr run $example --device $device --executor $executor $*"
build/tools/tsr/tsr run "$example" --device "$device" --executor "$executor" "$@"
