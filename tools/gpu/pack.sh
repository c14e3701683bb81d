#!/usr/bin/env bash
# Packs what tools/gpu/suite.sh needs: the binaries (tsr, tsrc, tsr-eval, schedule_check, tsr-onnx-test and
# tsr-run-bundle from build/) stripped and xz-compressed, and three bundles of
# examples/train_regression.tsr, into DIR (default .gpu-bin, which .gitignore keeps out of the
# repository), for a GPU host that has no LLVM to build them. They need libz, libzstd and
# libstdc++ there (LLVM and ANTLR are linked statically), and the ONNX and Protobuf libraries that
# tsrc and tsr link, which DIR/lib carries.
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=${1:-.gpu-bin}
# No binary linked from an object that ninja kept though a source or header changed while it was
# compiled (ninja 1.11 does; tools/stale_outputs.py): such a mix of two versions of a class is
# a crash on the GPU host (issue 20's SIGSEGV in graphReplayWanted was one).
if ! python3 tools/stale_outputs.py -C build --quiet; then
  echo "pack: not packing; run: flock /tmp/tsr-build.lock sh -c 'tools/stale_outputs.py -C build --fix && ninja -C build', then pack again" >&2
  exit 1
fi
mkdir -p "$DIR"
for b in build/tools/tsr/tsr build/tools/tsrc/tsrc build/tools/tsr-eval/tsr-eval build/tests/schedule_check \
         build/tools/tsr-run-bundle/tsr-run-bundle build/tools/onnx/tsr-onnx-test; do
  n=$(basename "$b")
  strip -o "$DIR/$n" "$b"
  xz -T0 -6 -f "$DIR/$n"
  echo "packed $DIR/$n.xz ($(du -h "$DIR/$n.xz" | cut -f1))"
done
# The shared libraries they link beyond the C/C++ runtime, libz and libzstd (ONNX and Protobuf
# for the ONNX importer; Gloo and what it links, for CPU collectives), into DIR/lib; suite.sh puts
# it on LD_LIBRARY_PATH.
mkdir -p "$DIR/lib"
for b in build/tools/tsr/tsr build/tools/tsrc/tsrc build/tools/tsr-eval/tsr-eval build/tests/schedule_check \
         build/tools/tsr-run-bundle/tsr-run-bundle build/tools/onnx/tsr-onnx-test; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | grep -E 'lib(onnx|protobuf|gloo|hiredis|ibverbs|nl-)' | while read -r l; do
  xz -T0 -6 -c "$l" >"$DIR/lib/$(basename "$l").xz"
  echo "packed $DIR/lib/$(basename "$l").xz ($(du -h "$DIR/lib/$(basename "$l").xz" | cut -f1))"
done
# ONNX's backend test data (Debian's libonnx-testdata, 40 MB, about 6 MB packed) for the suite's
# onnx_backend_gpu, where the GPU host has no libonnx-testdata.
if [[ -d /usr/share/libonnx-testdata/data ]]; then
  tar cf - -C /usr/share/libonnx-testdata data | xz -T0 -6 >"$DIR/onnx-testdata.tar.xz"
  echo "packed $DIR/onnx-testdata.tar.xz ($(du -h "$DIR/onnx-testdata.tar.xz" | cut -f1))"
fi
# Bundles for the suite's bundle steps, made by this compiler (the GPU host has none).
for t in cuda cpu; do
  build/tools/tsrc/tsrc examples/train_regression.tsr -o "$DIR/train_regression.$t.bundle" --target "$t"
  echo "packed $DIR/train_regression.$t.bundle ($(du -h "$DIR/train_regression.$t.bundle" | cut -f1))"
done
# A cuda bundle with every program of a run with the default flags (--trace ""), for tsr-run-bundle, which
# compiles nothing.
build/tools/tsrc/tsrc examples/train_regression.tsr -o "$DIR/train_regression.traced.cuda.bundle" --target cuda --trace ""
echo "packed $DIR/train_regression.traced.cuda.bundle ($(du -h "$DIR/train_regression.traced.cuda.bundle" | cut -f1))"
