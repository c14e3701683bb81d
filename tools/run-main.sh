#!/usr/bin/env bash
# The main job: set up, build, and train the Vision Transformer of examples/digits_vit.tsr on the
# digits data set (one line per epoch, the final test accuracy, and the loss/accuracy curves in
# digits_vit_curve.svg). Extra arguments go to the program: tools/run-main.sh --epochs 10.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh
# `--device auto`: the first GPU where the NVIDIA driver sees one, else the CPU (one line says
# why). TSR_DEVICE=cpu|cuda|cuda:N chooses.
device=${TSR_DEVICE:-auto}
# Graphs and kernels run compiled (the default of `tsr run`: a step runs interpreted until its
# work pays for its compilation, then as machine code); TSR_EXECUTOR=reference selects the
# reference evaluator instead (docs/performance.md, "Main job", has both executors' figures).
executor=${TSR_EXECUTOR:-compiled}
example=examples/digits_vit.tsr
echo "== tsr run $example --device $device --executor $executor $*"
build/tools/tsr/tsr run "$example" --device "$device" --executor "$executor" "$@"
