#!/usr/bin/env bash
# The main job: set up, build, and check the spec's transformer block, printing every inferred
# type and symbolic shape.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh
example=examples/transformer_block.tsr
echo "== tsrc --emit=types $example"
build/tools/tsrc/tsrc "$example" --emit=types
