#!/usr/bin/env bash
# Packs what tools/gpu/py_cuda.sh needs into DIR (default .gpu-bin/python, which .gitignore keeps
# out of the repository), for a machine with an NVIDIA GPU that has no compiler for this project:
#   tessera.tar.xz            the `tessera` package from BUILD/python (the extension modules
#                             stripped; LLVM is linked into _compiler), its Python files, the stdlib
#   lib/*.so*.xz              shared libraries the modules link that such a machine may lack (ANTLR)
#   model.cpu.bundle, model.cuda.bundle   tests/python/model.tsr for each target, traced with main's
#                             shapes (the GPU machine has no tsrc)
#   cuda_gpu_external.xz      the backend over borrowed memory and a borrowed stream (C++, no Python)
#   ABI                       the extension modules' Python ABI (EXT_SUFFIX): they import only
#                             under a Python of that version
#   tools/gpu/pack_python.sh [DIR]     (BUILD: TSR_BUILD_DIR, default build)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${TSR_BUILD_DIR:-build}
DIR=${1:-.gpu-bin/python}
rm -rf "$DIR"
mkdir -p "$DIR/lib"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/tessera"
cp "$BUILD/python/tessera/__init__.py" "$BUILD/python/tessera/torch.py" "$stage/tessera/"
cp -r "$BUILD/python/tessera/stdlib" "$stage/tessera/"
for so in "$BUILD"/python/tessera/_*.so; do
  strip --strip-unneeded -o "$stage/tessera/$(basename "$so")" "$so"
done
tar -C "$stage" -cf - tessera | xz -T0 -6 >"$DIR/tessera.tar.xz"
echo "packed $DIR/tessera.tar.xz ($(du -h "$DIR/tessera.tar.xz" | cut -f1))"
ls "$BUILD"/python/tessera/_runtime*.so | sed -E 's/.*_runtime(.*)$/\1/' >"$DIR/ABI"
echo "the modules' ABI: $(cat "$DIR/ABI")"
# Beyond the C/C++ runtime, libz and libzstd: ANTLR's runtime (the modules link it shared).
for so in "$BUILD"/python/tessera/_*.so "$BUILD/tests/cuda/cuda_gpu_external"; do
  ldd "$so" | awk '/=> \// {print $3}'
done | sort -u | grep -E 'libantlr4' | while read -r l; do
  xz -T0 -6 -c "$l" >"$DIR/lib/$(basename "$l").xz"
  echo "packed $DIR/lib/$(basename "$l").xz"
done
for t in cpu cuda; do
  "$BUILD/tools/tsrc/tsrc" tests/python/model.tsr -o "$DIR/model.$t.bundle" --target "$t" --trace ""
done
strip -o "$DIR/cuda_gpu_external" "$BUILD/tests/cuda/cuda_gpu_external"
xz -T0 -6 -f "$DIR/cuda_gpu_external"
du -sh "$DIR"
