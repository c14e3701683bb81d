#!/usr/bin/env bash
# Bad ONNX input (tests/onnx/bad/): each model must be refused by `tsrc FILE --check` with exit
# code 1 (a user error: not 70, not a signal) and a message naming what applies: the file, the
# node's name, its op type, the opset.
#
#   bad_input.sh TSRC DIR [--negative]
# --negative (the negative control): every bad model replaced by a valid one; every case must then
# fail.
set -uo pipefail
tsrc=$1
dir=$2
if [[ "${3:-}" == --negative ]]; then
  neg=$(mktemp -d)
  trap 'rm -rf "$neg"' EXIT
  for f in "$dir"/*.onnx; do cp "$dir/good.onnx" "$neg/$(basename "$f")"; done
  dir=$neg
fi
passed=0
failed=0
check() { # FILE REGEX...
  local f=$dir/$1; shift
  local out rc
  out=$("$tsrc" "$f" --check 2>&1); rc=$?
  local ok=1
  [[ $rc == 1 ]] || ok=0
  for re in "$@"; do grep -qE -- "$re" <<<"$out" || ok=0; done
  if ((ok)); then passed=$((passed + 1)); echo "PASS $1"; else failed=$((failed + 1)); echo "FAIL $1: exit $rc: $out"; fi
}
check not_onnx.onnx "not_onnx.onnx" "not an ONNX model"
check truncated.onnx "truncated.onnx" "not an ONNX model"
check unknown_op.onnx "unknown_op.onnx" "node \`frob\`" "Frobnicate" "opset 17" "not supported"
check bad_attribute.onnx "bad_attribute.onnx" "node \`pad_wrap\`" "\(Pad, opset 17\)" "mode \`wrap\`"
check opset99.onnx "opset99.onnx" "opset 99" "7 to 17"
check missing_external.onnx "missing_external.onnx" "tensor \`w\`" "missing_weights.bin"
# Convolution and pooling (Graph IR's conv and max_pool): channels that do not match the weight's,
# a window larger than the padded input (made by ONNX's helper at opset 13).
check conv_channels.onnx "conv_channels.onnx" "node \`conv_bad\`" "\(Conv, opset 13\)" "the input has 3 channels but the weight expects 2"
check pool_too_large.onnx "pool_too_large.onnx" "node \`pool_big\`" "\(MaxPool, opset 13\)" "larger than the padded input"
# Control flow Graph IR cannot express: a Loop without a trip count (an unbounded while).
check while_loop.onnx "while_loop.onnx" "node \`while_loop\`" "\(Loop, opset 13\)" "without a trip count"
echo "$passed passed, $failed failed"
((failed == 0))
